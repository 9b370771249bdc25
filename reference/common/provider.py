"""ReferenceProvider: the provider side every reference backend shares.

A backend names its credentials (variable: how to get it), its SDK if it has
one, the loggers of its client libraries, and implements four hooks:
``configure`` (the validated settings; a SettingsError for anything unusable),
``ready_detail`` (what the probe says when all is well), ``extra_doctor_rows``
and ``open`` (build the environment).  Everything else is decided here, once:

- is_available(), probe(), doctor_checks() and check_requirements() never
  raise and never call the network.  A missing SDK says what to install; a
  missing credential, one the secret scope cannot read, or an unusable setting
  reports the backend not ready and names the setting and the fix.
- create_environment checks the workspace binding, gives Hermes's prompt-time
  probe its stub (when the backend keeps the probe off the service), imports
  the SDK (ImportError with the pip command), and turns a SettingsError into
  ``errors.refused``: the same exception in every backend.  Every credential
  it read is masked in the client libraries' loggers before any client exists.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agent.terminal_env_provider import TerminalEnvironmentProvider

from reference.common.credentials import required, secret
from reference.common.errors import SettingsError, refused
from reference.common.plugin import PROBE_TASK_ID, PromptProbeStub, sdk_version
from reference.common.redact import guard_loggers
from reference.common.workspace_binding import check as check_binding

Row = tuple[bool, str, str]
NOT_READY = ("needs_setup", "unavailable")


@dataclass(frozen=True)
class Sdk:
    """A vendor SDK: its import name, its distribution and the command that installs it."""

    module: str
    distribution: str
    install: str

    def version(self) -> str | None:
        return sdk_version(self.module, self.distribution)

    def missing(self) -> str:
        return f"the {self.distribution} SDK is not installed: {self.install}"


@dataclass(frozen=True)
class Setup:
    """A backend's validated configuration: the credentials it read and its other settings."""

    credentials: Mapping[str, str] = field(repr=False)
    settings: Any

    @property
    def secrets(self) -> tuple[str, ...]:
        return tuple(self.credentials.values())


class ReferenceProvider(TerminalEnvironmentProvider):
    is_remote = True
    is_container = True
    # Every non-persistent environment gets a sandbox of its own; sessions never share one.
    session_isolated_when_nonpersistent = True

    #: required variables, read through the secret scope: name -> how to get it
    credentials: ClassVar[Mapping[str, str]] = {}
    #: variables never passed into the sandbox (Hermes strips them from its own subprocesses too)
    blocked: ClassVar[frozenset[str]] = frozenset()
    sdk: ClassVar[Sdk | None] = None
    #: loggers of the client libraries, masked for every credential (some log request headers at DEBUG)
    client_loggers: ClassVar[tuple[str, ...]] = ()
    #: what the prompt-time probe's stub says; None: the probe gets an environment of its own
    probe_stub: ClassVar[str | None] = None

    @property
    def logger(self) -> logging.Logger:
        return logging.getLogger(f"reference.{self.name}")

    @property
    def strip_env_keys(self) -> frozenset[str]:
        return frozenset(self.blocked)

    # -- the vendor's hooks ---------------------------------------------------------------
    def configure(self, container_config: dict[str, Any] | None = None, *, image: str | None = None) -> Any:
        """Validated settings with a ``secrets`` attribute; SettingsError for anything unusable.

        Offline and cheap: status calls run it too.
        """
        return Setup(required(self.credentials), None)

    def ready_detail(self, configured: Any, version: str | None) -> str:
        """What probe() says about a usable configuration."""
        return f"{self.display_name} is configured"

    def extra_doctor_rows(self, configured: Any) -> list[Row]:
        return []

    def open(self, configured: Any, *, task_id: str, cwd: str, timeout: int) -> Any:
        """The environment for ``task_id``: the vendor's calls start here."""
        raise NotImplementedError

    # -- status: never raises, never calls the network -----------------------------------
    def _status(self) -> tuple[str, str, Any]:
        """(status, detail, configured or None) for probe and check_requirements."""
        try:
            version = self.sdk.version() if self.sdk is not None else None
            if self.sdk is not None and version is None:
                return ("unavailable", self.sdk.missing(), None)
            configured = self.configure()
            return ("ready", self.ready_detail(configured, version), configured)
        except SettingsError as exc:
            return ("needs_setup", str(exc), None)
        except Exception as exc:
            return ("unavailable", f"cannot read the configuration ({type(exc).__name__})", None)

    def is_available(self) -> bool:
        try:
            if self.sdk is not None and self.sdk.version() is None:
                return False
            return all(secret(name) is not None for name in self.credentials)
        except Exception:  # a broken secret scope: not available, and nothing read elsewhere
            return False

    def probe(self) -> tuple[str, str]:
        status, detail, _ = self._status()
        return (status, detail)

    def check_requirements(self, terminal_config: dict[str, Any]) -> bool:
        status, detail, _ = self._status()
        if status in NOT_READY:
            self.logger.warning("%s is not usable: %s", self.name, detail)
            return False
        return True

    def doctor_checks(self) -> list[Row]:
        rows: list[Row] = []
        if self.sdk is not None:
            version = self.sdk.version()
            rows.append(
                (
                    version is not None,
                    f"{self.sdk.distribution} SDK",
                    f"({version})" if version else f"(missing: {self.sdk.install})",
                )
            )
        rows.extend(self._credential_rows())
        if all(ok for ok, _, _ in rows):
            try:
                rows.extend(self.extra_doctor_rows(self.configure()))
            except SettingsError as exc:
                rows.append((False, f"{self.name} settings", f"({exc})"))
            except Exception as exc:
                rows.append((False, f"{self.name} settings", f"(unreadable: {type(exc).__name__})"))
        return rows

    def _credential_rows(self) -> Iterable[Row]:
        for name, fix in self.credentials.items():
            try:
                set_ = secret(name) is not None
            except SettingsError as exc:
                yield (False, name, f"({exc})")
                continue
            except Exception as exc:
                yield (False, name, f"(unreadable: {type(exc).__name__})")
                continue
            yield (set_, name, "(set)" if set_ else f"(missing: {fix})")

    # -- creation ------------------------------------------------------------------------
    def create_environment(
        self,
        *,
        cwd: str,
        timeout: int,
        task_id: str = "default",
        image: str | None = None,
        container_config: dict[str, Any] | None = None,
        workspace_binding: Any = None,
        **kwargs: Any,
    ) -> Any:
        # Context only: no reference backend mounts or syncs anything of a bound host workspace.
        check_binding(workspace_binding, self.name)
        task = str(task_id)
        if task == PROBE_TASK_ID and self.probe_stub is not None:
            return PromptProbeStub(cwd, timeout, says=f"{self.name}: {self.probe_stub}")
        if self.sdk is not None:
            try:
                importlib.import_module(self.sdk.module)
            except ImportError as exc:
                raise ImportError(f"{self.name} needs the {self.sdk.distribution} SDK: {self.sdk.install}") from exc
        try:
            configured = self.configure(container_config, image=image)
        except SettingsError as exc:
            raise refused(exc, self.name) from None
        for value in getattr(configured, "secrets", ()):
            guard_loggers(self.client_loggers, value)
        return self.open(configured, task_id=task, cwd=cwd, timeout=int(timeout or 180))
