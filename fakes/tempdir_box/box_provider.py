"""TempdirBoxProvider: the provider Hermes registers for backend ``tempdir_box``."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from agent.terminal_env_provider import TerminalEnvironmentProvider

from . import provider_config
from .boxes import Box, box_id_for, default_root, owner_digest

logger = logging.getLogger("fakes.tempdir_box")
TOKEN_VAR = "TEMPDIR_BOX_TOKEN"


def _secret(name: str) -> str | None:
    from agent.secret_scope import get_secret

    value = get_secret(name)
    return value.strip() if value and value.strip() else None


def _as_bool(value: Any, default: bool) -> bool:
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


class TempdirBoxProvider(TerminalEnvironmentProvider):
    name = "tempdir_box"
    is_remote = False
    is_container = True
    session_isolated_when_nonpersistent = True
    default_cwd = "~"
    environment_class: type | None = None  # the kit's mutants swap in broken variants
    # Optional capabilities this backend claims (README: "Declaring capabilities").
    conformance_capabilities = frozenset({"persistence", "stdin-stream", "file-sync"})

    @property
    def display_name(self) -> str:
        return "Temp-dir box"

    @property
    def description(self) -> str:
        return "Run commands in a private temp directory on this machine (for testing backends)."

    @property
    def env_description(self) -> str:
        return "a private temp directory on this Linux machine with its own HOME"

    @property
    def strip_env_keys(self) -> frozenset[str]:
        return frozenset({TOKEN_VAR})

    @property
    def cache_path_base(self) -> str:
        return "~/.hermes"

    @property
    def skip_container_guards(self) -> bool:
        return False  # boxes are directories on this machine: every host path stays reachable

    def is_available(self) -> bool:
        return shutil.which("bash") is not None

    def check_requirements(self, config: dict[str, Any]) -> bool:
        for problem in provider_config.problems(config.get("backend_config")):
            logger.warning("%s; fix it in config.yaml", problem)
            return False
        if self.is_available():
            return True
        logger.warning("tempdir_box needs bash on PATH; install bash")
        return False

    def probe(self) -> tuple[str, str]:
        if not self.is_available():
            return ("unavailable", "bash is not installed")
        return ("ready", f"boxes under {default_root()}")

    # The host's provider-configuration extension: settings under terminal.backends.tempdir_box.
    def get_config_schema(self) -> dict[str, dict[str, Any]]:
        return {key: dict(spec) for key, spec in provider_config.SCHEMA.items()}

    def resolve_config(self, config: Any) -> dict[str, Any]:
        return provider_config.resolve(config)

    def probe_with_config(self, config: Any) -> tuple[str, str]:
        found = provider_config.problems(config)
        return ("needs_setup", found[0]) if found else self.probe()

    def setup_instructions(self) -> list[str]:
        return ["No setup needed: boxes are temp directories under $TEMPDIR_BOX_ROOT (or the system temp dir)."]

    def box_root(self) -> Path:
        """Where this provider's boxes live ($TEMPDIR_BOX_ROOT, else a per-user temp directory)."""
        return default_root()

    def conformance_delete_sandbox(self, env: Any) -> None:
        """Delete the box ``env`` runs in behind its back, as another client of the same boxes
        would: the kit's black-box checks of a lost sandbox call it (the vendor's own delete)."""
        env._box.delete()

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
        from .environment import TempdirBoxEnvironment

        cc = container_config or {}
        persistent = _as_bool(
            cc.get("container_persistent"), default=provider_config.persistent_default(kwargs.get("backend_config"))
        )
        if task_id == "prompt-backend-probe":
            persistent = False  # the prompt probe must never keep or reuse a box
        root = self.box_root()
        root.mkdir(parents=True, exist_ok=True)
        box = Box(root / box_id_for(str(task_id), persistent=persistent))
        return (self.environment_class or TempdirBoxEnvironment)(
            box=box,
            task_id=str(task_id),
            cwd=cwd or self.default_cwd,
            timeout=int(timeout or 180),
            persistent=persistent,
            owner=owner_digest(_secret(TOKEN_VAR)),
        )
