"""Stand-in for ``tools.environments.remote_common``: what non-local backends share.

``resolve_passthrough_env`` gives a remote backend the values of the passthrough
variables (skills' required variables and ``terminal.env_passthrough``) minus
Hermes's own provider credentials, and, under profile multiplexing, the names
the active profile's scope lacks: the backend unsets those in the sandbox
(``prepend_unset``) so a shared sandbox never keeps another profile's value.
Names given in ``explicit_forward`` are the operator's own choice and skip the
credential filter.  Works with hosts whose ``tools.env_passthrough`` predates
scoped resolution: values then come from the secret scope directly.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def load_hermes_env_vars() -> dict[str, str]:
    """``$HERMES_HOME/.env`` as a dict; an unreadable file gives ``{}`` (commands must still run)."""
    try:
        from hermes_constants import get_hermes_home

        text = (Path(get_hermes_home()) / ".env").read_text("utf-8-sig")
    except Exception:
        return {}
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        name, sep, value = line.partition("=")
        if sep and _NAME.match(name.strip()):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            values[name.strip()] = value
    return values


def _is_credential(name: str) -> bool:
    try:
        from tools import env_passthrough
    except Exception:
        return False
    for attr in ("is_hermes_provider_credential", "_is_hermes_provider_credential"):
        check = getattr(env_passthrough, attr, None)
        if callable(check):
            try:
                return bool(check(name))
            except Exception:
                return True  # a filter that cannot decide keeps the name out
    return False


def _scoped_value(name: str, fallback: str | None) -> str | None:
    """Scope-aware value for hosts whose env_passthrough has no resolve_passthrough_value."""
    from agent import secret_scope

    is_global = getattr(secret_scope, "_is_global_env", lambda _n: False)
    if fallback is not None and is_global(name):
        return fallback
    multiplexed = secret_scope.is_multiplex_active()
    if secret_scope.current_secret_scope() is None:
        return secret_scope.get_secret(name) if multiplexed else fallback
    value = secret_scope.get_secret(name, None)
    return value if value is not None or multiplexed else fallback


def resolve_passthrough_env(
    explicit_forward: Iterable[str] = (),
    hermes_env_loader: Callable[[], dict[str, str]] = load_hermes_env_vars,
) -> tuple[dict[str, str], set[str]]:
    """(values to set in the sandbox, names to unset there).

    Under multiplexing with no scope installed the value lookup raises
    UnscopedSecretError, as Hermes's does: the caller must run inside a scope.
    """
    names: set[str] = set()
    resolve: Callable[[str, str | None], str | None] = _scoped_value
    multiplexed = False
    is_global: Callable[[str], bool] = lambda _n: False  # noqa: E731
    try:
        from agent import secret_scope
        from tools import env_passthrough

        names = set(env_passthrough.get_all_passthrough())
        resolve = getattr(env_passthrough, "resolve_passthrough_value", _scoped_value)
        multiplexed = secret_scope.is_multiplex_active()
        is_global = getattr(secret_scope, "_is_global_env", is_global)
    except Exception:
        pass
    forward = set(explicit_forward) | {n for n in names if not _is_credential(n)}
    dotenv = hermes_env_loader() if forward else {}
    values: dict[str, str] = {}
    unset: set[str] = set()
    for name in sorted(forward):
        value = resolve(name, os.getenv(name) or dotenv.get(name))
        if value is not None:
            values[name] = value
        elif multiplexed and not is_global(name) and _NAME.match(name):
            unset.add(name)
    return values, unset


def prepend_unset(cmd_string: str, names: Iterable[str]) -> str:
    """``cmd_string`` preceded by an ``unset`` of ``names`` (nothing added when there are none)."""
    ordered = sorted(names)
    if not ordered:
        return cmd_string
    return f"unset {' '.join(shlex.quote(n) for n in ordered)} 2>/dev/null || true\n{cmd_string}"


def client_env_with(values: dict[str, str]) -> dict[str, str] | None:
    """The environment of a local client process that carries ``values``; None means inherit."""
    return {**os.environ, **values} if values else None


def bash_argv(cmd_string: str, login: bool = False) -> list[str]:
    return ["bash", "-l", "-c", cmd_string] if login else ["bash", "-c", cmd_string]
