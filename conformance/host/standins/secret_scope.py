"""Stand-in for ``agent.secret_scope``: profile-scoped credential reads.

With a scope installed, it is authoritative; without one, reads fall back to
os.environ unless multiplexing is on, in which case they fail closed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar, Token

_scope: ContextVar[Mapping[str, str] | None] = ContextVar("hermes_secret_scope", default=None)
_multiplex = False
_GLOBAL_NAMES = frozenset({"HERMES_HOME", "HERMES_PROFILE", "PATH", "HOME", "USER", "LANG", "LC_ALL",
                           "TZ", "PWD", "SHELL", "TMPDIR", "VIRTUAL_ENV", "PYTHONPATH"})
_GLOBAL_PREFIXES = ("TERMINAL_", "HERMES_KANBAN_")


class UnscopedSecretError(RuntimeError):
    """A credential was read while multiplexing with no scope installed."""


def set_multiplex_active(active: bool) -> None:
    global _multiplex
    _multiplex = bool(active)


def is_multiplex_active() -> bool:
    return _multiplex


def set_secret_scope(secrets: Mapping[str, str] | None) -> Token:
    return _scope.set(secrets)


def reset_secret_scope(token: Token) -> None:
    _scope.reset(token)


def current_secret_scope() -> Mapping[str, str] | None:
    return _scope.get()


def get_secret(name: str, default: str | None = None) -> str | None:
    if name in _GLOBAL_NAMES or name.startswith(_GLOBAL_PREFIXES):
        return os.environ.get(name, default)
    scope = _scope.get()
    if scope is not None:
        value = scope.get(name)
        return default if value is None else value
    if _multiplex:
        raise UnscopedSecretError(f"get_secret({name!r}) read with no profile secret scope installed")
    return os.environ.get(name, default)
