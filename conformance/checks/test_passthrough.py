"""Passthrough variables: what Hermes lets into a remote sandbox on purpose.

A skill's required variables (``tools.env_passthrough.register_env_passthrough``)
and ``terminal.env_passthrough`` in config.yaml name host variables that must
reach the sandbox's commands; the backend's own credentials never do.  Under
profile multiplexing a name the active profile's scope lacks must be unset in
the sandbox, so a sandbox shared by profiles never keeps another's value.
Commands run through ``kit.call`` so the check's context (the registered names,
the secret scope) is the one the backend sees, as on Hermes's tool thread.
"""

from __future__ import annotations

import importlib
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml

from conformance.checks._support import out, rc

TIMEOUT = 30


def _name(label: str) -> str:
    return f"KIT_PASS_{label}_{secrets.token_hex(4).upper()}"


def _execute(kit: Any, env: Any, command: str) -> dict[str, Any]:
    return kit.call(env.execute, command, timeout=TIMEOUT, deadline=TIMEOUT + 10, what=f"execute({command[:60]!r})")


def _forget_config_cache(module: Any) -> None:
    """Hosts memoise terminal.env_passthrough; the check changes config.yaml, as a restart would see it."""
    cache = getattr(module, "_config_cache", None)
    if isinstance(cache, dict):
        cache.clear()
    if hasattr(module, "_config_passthrough"):
        held = module._config_passthrough
        if isinstance(held, dict):
            held.clear()
        else:
            module._config_passthrough = None


@contextmanager
def passthrough(kit: Any, *, skill: list[str], config: list[str]) -> Iterator[None]:
    """Register ``skill`` names as a loaded skill does and list ``config`` names in config.yaml."""
    module = importlib.import_module("tools.env_passthrough")
    path = kit.hermes_home / "config.yaml"
    original = path.read_bytes() if path.exists() else None
    data = (yaml.safe_load(original) if original else None) or {}
    terminal = data.setdefault("terminal", {})
    terminal["env_passthrough"] = [*(terminal.get("env_passthrough") or []), *config]
    path.write_text(yaml.safe_dump(data), "utf-8")
    _forget_config_cache(module)
    module.register_env_passthrough(skill)
    try:
        yield
    finally:
        module.clear_env_passthrough()
        if original is None:
            path.unlink(missing_ok=True)
        else:
            path.write_bytes(original)
        _forget_config_cache(module)


@pytest.mark.clause("env.passthrough")
def test_passthrough_variables_reach_the_sandbox(kit, monkeypatch):
    from_skill, from_config = _name("SKILL"), _name("CONFIG")
    values = {from_skill: "skill-" + secrets.token_hex(8), from_config: "config-" + secrets.token_hex(8)}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    blocked = sorted(kit.provider.strip_env_keys)
    with passthrough(kit, skill=[from_skill, *blocked], config=[from_config]):
        env = kit.create(track=False)
        try:
            probe = "; ".join(f"echo {n}=${{{n}-unset}}" for n in [*values, *blocked])
            first = _execute(kit, env, probe)
            again = _execute(kit, env, probe)
        finally:
            kit.cleanup(env)
    for label, result in (("first", first), ("second", again)):
        assert rc(result) == 0, f"the {label} command failed: {out(result)[-300:]!r}"
        text = out(result)
        missing = [n for n, v in values.items() if f"{n}={v}" not in text]
        assert not missing, (
            f"passthrough variables {missing} (registered by a skill / listed in terminal.env_passthrough, set on "
            f"the host) did not reach the sandbox's {label} command: {text[-300:]!r}"
        )
        leaked = [n for n in blocked if f"{n}=unset" not in text]
        assert not leaked, (
            f"{leaked} (strip_env_keys) reached the sandbox because it was registered as passthrough; "
            "a backend's own credentials never go in"
        )


@pytest.mark.clause("env.passthrough-unset")
def test_names_the_active_scope_lacks_are_unset(kit, monkeypatch):
    name = _name("SCOPED")
    in_environ, left_behind = "environ-" + secrets.token_hex(8), "left-" + secrets.token_hex(8)
    scope = importlib.import_module("agent.secret_scope")
    # The profile's own configuration (endpoint, key ...) is everything the run configured; it lacks ``name``.
    profile = dict(os.environ)
    monkeypatch.setenv(name, in_environ)  # the process environment holds another profile's value
    with passthrough(kit, skill=[name], config=[]):
        token = scope.set_secret_scope(profile)
        scope.set_multiplex_active(True)
        env = None
        try:
            env = kit.create(track=False)
            _execute(kit, env, f"export {name}={left_behind}")  # left in the shared sandbox by another profile
            result = _execute(kit, env, f"echo {name}=${{{name}-unset}}")
        finally:
            scope.set_multiplex_active(False)
            scope.reset_secret_scope(token)
            if env is not None:
                kit.cleanup(env)
    text = out(result)
    assert rc(result) == 0, f"the command under the profile's scope failed: {text[-300:]!r}"
    where = (
        "the host process environment's value"
        if in_environ in text
        else "the value an earlier command left"
        if left_behind in text
        else "a value"
    )
    assert f"{name}=unset" in text, (
        f"{name} is a passthrough name the active profile's secret scope lacks, but the sandbox still has "
        f"{where}; it must be unset there: {text[-200:]!r}"
    )
