"""Stand-in for ``agent.terminal_env_provider``: the terminal backend provider ABC.

Members and defaults follow research/hermes-host.md section 2.2, including the
provider-configuration extension (get_config_schema and friends) and the
WorkspaceBinding a container provider may receive, so plugins written against
either can subclass it or import it unchanged.
"""

from __future__ import annotations

import copy
import json
import posixpath
import re
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from conformance.host.standins.provider_base import ProviderBase

_KEY_SEGMENT = re.compile(r"^[A-Za-z0-9_-]+$")
_FORBIDDEN_SEGMENTS = frozenset({"__proto__", "constructor", "prototype"})
_FIELD_TYPES = frozenset({"boolean", "list", "number", "secret", "select", "string", "text"})
_SECRET_FORBIDDEN = ("const", "default", "example", "examples", "options", "value")

# Where a host found the workspace it binds: the session's, an explicit task's, the
# non-isolated CLI process's, or a legacy caller of the factory.
WORKSPACE_BINDING_SOURCES = frozenset({"session", "task", "process", "factory"})


@dataclass(frozen=True)
class WorkspaceBinding:
    """The host workspace a task or session is assigned, with where that assignment came from.

    Context for the provider, never an authorisation: a provider validates it and
    mounts or syncs nothing because of it unless its own policy says so.
    """

    host_path: str
    source: str

    def __post_init__(self) -> None:
        if not isinstance(self.host_path, str) or not self.host_path.startswith("/") or "\x00" in self.host_path:
            raise ValueError(f"WorkspaceBinding.host_path must be an absolute path, not {self.host_path!r}")
        if posixpath.normpath(self.host_path) != self.host_path.rstrip("/") and self.host_path != "/":
            raise ValueError(f"WorkspaceBinding.host_path must be normalised, not {self.host_path!r}")
        if self.source not in WORKSPACE_BINDING_SOURCES:
            raise ValueError(
                f"WorkspaceBinding.source must be one of {sorted(WORKSPACE_BINDING_SOURCES)}, not {self.source!r}"
            )


class TerminalEnvironmentProvider(ProviderBase):
    is_remote: bool = True
    is_container: bool = True
    session_isolated_when_nonpersistent: bool = False

    @property
    def description(self) -> str:
        return f"Run commands in a {self.display_name} environment."

    @property
    def skip_container_guards(self) -> bool:
        return bool(self.is_container)

    @property
    def cache_path_base(self) -> str | None:
        return None

    @property
    def strip_env_keys(self) -> frozenset[str]:
        return frozenset()

    @property
    def env_description(self) -> str:
        return f"a {self.display_name} environment (likely Linux)"

    @abstractmethod
    def is_available(self) -> bool:
        """Cheap, offline: may the backend be used at all?"""

    def check_requirements(self, config: dict[str, Any]) -> bool:
        return bool(self.is_available())

    def probe(self) -> tuple[str, str]:
        try:
            ready = bool(self.is_available())
        except Exception:
            ready = False
        return ("ready", "") if ready else ("needs_setup", f"{self.display_name} is not configured.")

    def probe_with_config(self, config: Mapping[str, Any]) -> tuple[str, str]:
        return self.probe()

    def setup_instructions(self) -> list[str]:
        return []

    def post_setup(self) -> None:
        return None

    def doctor_checks(self) -> list[tuple[bool, str, str]]:
        try:
            ok = bool(self.is_available())
        except Exception:
            ok = False
        detail = "(configured)" if ok else "(not configured — see setup instructions)"
        return [(ok, f"{self.display_name} backend", detail)]

    def get_config_schema(self) -> dict[str, Any]:
        return {}

    def validated_config_schema(self) -> dict[str, Any]:
        schema = self.get_config_schema()
        if not isinstance(schema, Mapping):
            raise TypeError("get_config_schema() must return a mapping")
        for key, spec in schema.items():
            if not isinstance(key, str) or not key:
                raise TypeError(f"config key {key!r} must be a non-empty string")
            for segment in key.split("."):
                if not _KEY_SEGMENT.match(segment) or segment in _FORBIDDEN_SEGMENTS:
                    raise ValueError(f"config key {key!r} has an unsafe segment {segment!r}")
            if not isinstance(spec, Mapping) or not all(isinstance(k, str) for k in spec):
                raise TypeError(f"config field {key!r} must be a mapping with string keys")
            kind = spec.get("type", "string")
            if kind not in _FIELD_TYPES:
                raise ValueError(f"config field {key!r} has unknown type {kind!r}")
            if kind == "secret":
                bad = [k for k in _SECRET_FORBIDDEN if k in spec]
                if bad:
                    raise ValueError(f"secret field {key!r} may not carry {', '.join(bad)}")
            if kind == "select":
                options = spec.get("options")
                if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
                    raise TypeError(f"select field {key!r} needs a list of string options")
            try:
                json.dumps(spec, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"config field {key!r} is not JSON-safe: {exc}") from None
        return copy.deepcopy(dict(schema))

    def resolve_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(config))

    def validated_config(self, config: Mapping[str, Any]) -> dict[str, Any]:
        resolved = self.resolve_config(copy.deepcopy(dict(config)))
        if not isinstance(resolved, Mapping):
            raise TypeError("resolve_config() must return a mapping")
        return dict(resolved)

    @abstractmethod
    def create_environment(
        self,
        *,
        cwd: str,
        timeout: int,
        task_id: str = "default",
        image: str | None = None,
        container_config: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Return a BaseEnvironment (or duck type) for ``task_id``."""
