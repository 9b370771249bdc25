"""Stand-in for ``agent.secret_scope``: profile-scoped credential reads.

Deployment-wide names (HERMES_HOME, PATH, ``TERMINAL_*`` ...) always come from
os.environ.  Otherwise an installed scope is read first.  Under profile
multiplexing the scope is authoritative (a name it lacks gets the default) and
a read with no scope installed raises UnscopedSecretError rather than reading
os.environ, which may hold another profile's value.  Without multiplexing a
scope is an overlay: a name it lacks falls through to os.environ.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar, Token

_scope: ContextVar[Mapping[str, str] | None] = ContextVar("hermes_secret_scope", default=None)
_multiplex = False
# Process- and deployment-level settings, never per-profile secrets.
_GLOBAL_NAMES = frozenset(
    {
        "HERMES_HOME",
        "HERMES_PROFILE",
        "HERMES_GATEWAY_LOCK_DIR",
        "HERMES_MAX_ITERATIONS",
        "HERMES_MAX_TOKENS",
        "HERMES_API_TIMEOUT",
        "HERMES_REDACT_SECRETS",
        "HERMES_NOUS_TIMEOUT_SECONDS",
        "_HERMES_GATEWAY",
        "PATH",
        "HOME",
        "USER",
        "LANG",
        "LC_ALL",
        "TZ",
        "PWD",
        "SHELL",
        "TMPDIR",
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "SSL_CERT_FILE",
        "HERMES_KANBAN_DB",
        "HERMES_KANBAN_WORKSPACES_ROOT",
        "HERMES_KANBAN_BOARD",
        "API_SERVER_ENABLED",
        "API_SERVER_HOST",
        "API_SERVER_PORT",
        "API_SERVER_CORS_ORIGINS",
        "GATEWAY_RELAY_URL",
        "GATEWAY_RELAY_ENDPOINT",
        "GATEWAY_RELAY_ALLOW_DIRECT_PLATFORMS",
        "GATEWAY_RELAY_PLATFORMS",
        "GATEWAY_RELAY_BOT_IDS",
        "GATEWAY_RELAY_ROUTE_KEYS",
        "GATEWAY_RELAY_INSTANCE_ID",
        "GATEWAY_RELAY_WAKE_URL",
        "GATEWAY_RELAY_DISPLAY_NAME",
    }
)
_GLOBAL_PREFIXES = ("HERMES_KANBAN_", "HERMES_TELEGRAM_", "TERMINAL_")


class UnscopedSecretError(RuntimeError):
    """A credential was read while multiplexing with no scope installed."""


def set_multiplex_active(active: bool) -> None:
    global _multiplex
    _multiplex = bool(active)


def is_multiplex_active() -> bool:
    return _multiplex


def set_secret_scope(secrets: Mapping[str, str] | None) -> Token[Mapping[str, str] | None]:
    return _scope.set(secrets)


def reset_secret_scope(token: Token[Mapping[str, str] | None]) -> None:
    _scope.reset(token)


def current_secret_scope() -> Mapping[str, str] | None:
    return _scope.get()


def _is_global_env(name: str) -> bool:
    """A deployment setting that every profile shares (read from os.environ even when multiplexing)."""
    return name in _GLOBAL_NAMES or name.startswith(_GLOBAL_PREFIXES)


def get_secret(name: str, default: str | None = None) -> str | None:
    if _is_global_env(name):
        return os.environ.get(name, default)
    scope = _scope.get()
    if scope is not None:
        value = scope.get(name)
        if value is not None:
            return value
        return default if _multiplex else os.environ.get(name, default)
    if _multiplex:
        raise UnscopedSecretError(
            f"get_secret({name!r}) was called with no profile secret scope installed while profiles are "
            "multiplexed; read it inside set_secret_scope(...) (reading os.environ could give another "
            "profile's value)"
        )
    return os.environ.get(name, default)
