"""env: what crosses from the host into the sandbox, and what never does."""

from __future__ import annotations

import importlib
import logging
import os
import secrets

import pytest

from conformance.checks._support import locate, out, rc, run

DUMP = "env; echo ---; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"


def _lines_with(text: str, needle: str, limit: int = 3) -> list[str]:
    """The sandbox's lines that show ``needle`` (evidence for the report; the kit redacts values)."""
    return [line[:200] for line in text.splitlines() if needle in line][:limit]


@pytest.mark.clause("env.strip-keys-invisible")
def test_credential_variables_are_invisible(kit, env):
    names = sorted(kit.provider.strip_env_keys)
    assert names, "the provider strips no credential variables; declare them in strip_env_keys"
    text = out(run(env, DUMP + "; " + "; ".join(f"printenv {n}" for n in names)))
    set_inside = [n for n in names if f"{n}=" in text]
    assert not set_inside, (f"{', '.join(set_inside)} set inside the sandbox (env or /proc/*/environ): "
                            f"{_lines_with(text, set_inside[0] + '=')}")
    shown = [n for n in names if os.environ.get(n) and os.environ[n] in text]
    assert not shown, f"the value of {', '.join(shown)} is visible inside the sandbox"


@pytest.mark.clause("env.no-host-leak")
def test_host_only_variable_stays_on_the_host(kit, make_env, monkeypatch):
    name, value = f"KIT_HOST_ONLY_{secrets.token_hex(4).upper()}", secrets.token_hex(12)
    monkeypatch.setenv(name, value)
    env = make_env()
    text = out(run(env, DUMP))
    leaked = _lines_with(text, name) or _lines_with(text, value)
    assert not leaked, f"host variable {name} leaked into the sandbox (env or /proc/*/environ): {leaked}"


@pytest.mark.clause("env.session-vars")
def test_session_variables_do_not_persist(env):
    run(env, "export HERMES_SESSION_KIT=1 HERMES_RPC_KIT=2 KIT_ORDINARY=3")
    seen = out(run(env, "echo ${HERMES_SESSION_KIT-unset} ${HERMES_RPC_KIT-unset} ${KIT_ORDINARY-unset}")).split()
    assert seen[:2] == ["unset", "unset"], f"per-session variables persisted: {seen}"


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.texts.append(text)


@pytest.mark.clause("env.key-not-logged")
def test_credentials_never_reach_the_logs(kit):
    root = logging.getLogger()
    capture, level = _Capture(), root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    try:
        p = kit.provider
        kit.call(p.is_available, deadline=10.0, what="is_available()")
        kit.call(p.probe, deadline=10.0, what="probe()")
        kit.call(p.doctor_checks, deadline=10.0, what="doctor_checks()")
        kit.call(p.check_requirements, {"kit_unknown_key": True}, deadline=10.0, what="check_requirements()")
        env = kit.create(track=False)
        run(env, "echo hello; kit_no_such_command")
        run(env, "sleep 5", timeout=1)
        if kit.has("world-states"):
            kit.world.delete(locate(kit, env))
            for _ in range(2):
                try:
                    run(env, "true")
                except AssertionError:
                    raise
                except Exception:
                    pass
        kit.cleanup(env)
    finally:
        root.removeHandler(capture)
        root.setLevel(level)
    for value in kit.secret_values():
        leaked = [t for t in capture.texts if value in t]
        assert not leaked, f"a credential value was logged: {leaked[0][:200]!r}"


@pytest.mark.clause("env.secret-scope")
def test_credential_comes_from_the_secret_scope(kit, monkeypatch):
    var = getattr(kit.fake, "credential_var", None)
    assert var, "the fake service names no credential variable"
    scope = importlib.import_module("agent.secret_scope")
    scoped = os.environ[var]
    monkeypatch.setenv(var, "kit-decoy-" + secrets.token_hex(8))
    # A profile's scope holds everything in its .env: the fake's endpoint too.
    profile = {**getattr(kit.fake, "env", {}), **{k: os.environ.get(k, "") for k in kit.secrets}}
    token = scope.set_secret_scope(profile | {var: scoped})
    try:
        env = kit.create(track=False)
    finally:
        scope.reset_secret_scope(token)
    try:
        sandbox = locate(kit, env)
        assert kit.world.authenticated_with(sandbox, scoped), (
            f"the sandbox was not created with the scoped {var}; the backend read os.environ instead"
        )
        assert rc(run(env, "true")) == 0
    finally:
        kit.cleanup(env)
