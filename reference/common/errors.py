"""The errors a reference backend raises to Hermes: one shape in every backend.

- ``SettingsError``: a setting (a variable read through the secret scope, or a
  ``terminal.*`` key) cannot be used.  It names the setting, what is wrong and
  the fix, and never carries a secret's value.
- ``refused``: what create_environment raises for a SettingsError.  It is the
  same SettingsError class in every backend and, at the same time, the host's
  EnvironmentConnectionError, so Hermes shows the terminal tool as degraded
  with the fix as its retry hint instead of an error with a traceback.
- ``connection_error``: infrastructure trouble (the service refused, could not
  be reached, or a sandbox is unusable), as the host's
  EnvironmentConnectionError carrying the backend's retry hint; text redacted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

from reference.common.redact import redact


class SettingsError(ValueError):
    """A setting is unusable: ``<setting> <problem>; <fix>``, e.g. ``X is not set; add X=... to .env``."""

    def __init__(self, setting: str, problem: str, fix: str) -> None:
        self.setting, self.problem, self.fix = setting, problem, fix
        super().__init__(f"{setting} {problem}; {fix}")

    def __reduce__(self) -> tuple[type[SettingsError], tuple[str, str, str]]:
        # Copied or pickled (the class made by ``refused`` is not importable): a plain SettingsError.
        return SettingsError, (self.setting, self.problem, self.fix)


def host_error_class() -> type[Exception]:
    """The host's EnvironmentConnectionError; RuntimeError on a host without it."""
    try:
        from tools.environments import base
    except ImportError:
        return RuntimeError
    found = getattr(base, "EnvironmentConnectionError", None)
    return found if isinstance(found, type) and issubclass(found, Exception) else RuntimeError


def _host_error(cls: type[Exception], instance: Exception | None, text: str, hint: str) -> Exception:
    """``cls(text, retry_hint=hint)`` (or initialise ``instance`` so); hosts whose class takes no hint get none."""
    target = instance if instance is not None else cls.__new__(cls)
    try:
        cls.__init__(target, text, retry_hint=hint)  # type: ignore[call-arg]
    except TypeError:
        cls.__init__(target, text)
    return target


_REFUSALS: dict[type[Exception], type[SettingsError]] = {}


def _refusal_class(host: type[Exception]) -> type[SettingsError]:
    cls = _REFUSALS.get(host)
    if cls is None:
        made = type(
            "SettingsRefused",
            (SettingsError, host),
            {"__module__": __name__, "__doc__": "A SettingsError that is also the host's connection error."},
        )
        cls = _REFUSALS.setdefault(host, cast(type[SettingsError], made))
    return cls


def refused(error: SettingsError, backend: str) -> SettingsError:
    """``error`` as create_environment raises it: a SettingsError and the host's EnvironmentConnectionError."""
    host = host_error_class()
    refusal = _refusal_class(host)(error.setting, error.problem, error.fix)
    _host_error(host, refusal, f"{backend}: {refusal}", error.fix)
    return refusal


def connection_error(
    backend: str, message: str, exc: BaseException | None = None, *, secrets: Iterable[str | None] = (), hint: str
) -> Exception:
    """EnvironmentConnectionError (RuntimeError on a host without it): ``backend: message[: exc]``, redacted."""
    text = redact(f"{backend}: {message}: {exc}" if exc is not None else f"{backend}: {message}", secrets)
    host = host_error_class()
    return _host_error(host, None, text, hint)


@dataclass(frozen=True)
class ConnectionErrors:
    """``connection_error`` for one backend: its name leads the text, its retry hint goes along."""

    backend: str
    hint: str

    def __call__(
        self, message: str, exc: BaseException | None = None, *, secrets: Iterable[str | None] = ()
    ) -> Exception:
        return connection_error(self.backend, message, exc, secrets=secrets, hint=self.hint)
