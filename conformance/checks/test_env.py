"""env: what crosses from the host into the sandbox, and what never does."""

from __future__ import annotations

import importlib
import logging
import os
import secrets

import pytest

from conformance.checks._support import (
    credential_values,
    locate,
    not_applicable,
    out,
    own_process_space,
    rc,
    run,
    unverified,
)

DUMP = "env; echo ---; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"
# Where a command shares the machine with every other process on it (a host-attached backend, boxes that
# are plain processes here), those are not the sandbox's: only the command's own shell (the environment
# the backend gave it) is read.
DUMP_OWN = "env; echo ---; tr '\\0' '\\n' < /proc/$$/environ 2>/dev/null"


def _dump(kit) -> str:
    """The sandbox's environments: every process in a sandbox of its own, else the command's own."""
    return DUMP if own_process_space(kit) else DUMP_OWN


def _lines_with(text: str, needle: str, limit: int = 3) -> list[str]:
    """The sandbox's lines that show ``needle`` (evidence for the report; the kit redacts values)."""
    return [line[:200] for line in text.splitlines() if needle in line][:limit]


@pytest.mark.clause("env.strip-keys-invisible")
def test_credential_variables_are_invisible(kit, env):
    names = sorted(kit.provider.strip_env_keys)
    if not names:
        not_applicable("the provider names no credential variables in strip_env_keys: there is nothing to hide")
    text = out(run(env, _dump(kit) + "; " + "; ".join(f"printenv {n}" for n in names)))
    set_inside = [n for n in names if f"{n}=" in text]
    assert not set_inside, (
        f"{', '.join(set_inside)} set inside the sandbox (env or /proc/*/environ): "
        f"{_lines_with(text, set_inside[0] + '=')}"
    )
    shown = [n for n in names if os.environ.get(n) and os.environ[n] in text]
    assert not shown, f"the value of {', '.join(shown)} is visible inside the sandbox"


@pytest.mark.clause("env.no-host-leak")
def test_host_only_variable_stays_on_the_host(kit, make_env, monkeypatch):
    name, value = f"KIT_HOST_ONLY_{secrets.token_hex(4).upper()}", secrets.token_hex(12)
    monkeypatch.setenv(name, value)
    env = make_env()
    text = out(run(env, _dump(kit)))
    leaked = _lines_with(text, name) or _lines_with(text, value)
    assert not leaked, f"host variable {name} leaked into the sandbox (env or /proc/*/environ): {leaked}"


# Per-session names the host never keeps from one command to the next (base_session_env.py).
SESSION_VARS = (
    "HERMES_SESSION_KIT",
    "HERMES_RPC_KIT",
    "HERMES_KERNEL_DIR",
    "HERMES_CRON_SESSION",
    "HERMES_CRON_AUTO_DELIVER_KIT",
    "HERMES_BROWSER_CONTROL_KIT",
    "HERMES_DELEGATED_CHILD_CONTEXT",
    "HERMES_UI_SESSION_ID",
)
# Re-exported by every command with the host's default when unset; a command's own value must not stick.
AGENT_MARKERS = {"AI_AGENT": "hermes-agent", "HERMES_AGENT": "true"}


@pytest.mark.clause("env.session-vars")
def test_session_variables_do_not_persist(env):
    names = [*SESSION_VARS, *AGENT_MARKERS]
    run(env, "export " + " ".join(f"{n}=kit-{i}" for i, n in enumerate(names)) + " KIT_ORDINARY=kept")
    text = out(run(env, "; ".join(f"echo {n}=${{{n}-unset}}" for n in [*names, "KIT_ORDINARY"])))
    seen = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    kept = [n for n in SESSION_VARS if seen.get(n) != "unset"]
    assert not kept, f"per-session variables persisted into the next command: {[f'{n}={seen.get(n)}' for n in kept]}"
    stuck = [n for n, default in AGENT_MARKERS.items() if seen.get(n) not in (default, "unset")]
    assert not stuck, f"a command's own {stuck} persisted instead of the host's default: {seen}"


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
    values = credential_values(kit)
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
    for value in values:
        leaked = [t for t in capture.texts if value in t]
        assert not leaked, f"a credential value was logged: {leaked[0][:200]!r}"


@pytest.mark.clause("env.secret-scope")
def test_credential_comes_from_the_secret_scope(kit, monkeypatch):
    if kit.fake is None:
        unverified("a live run: the kit does not know which variable holds the vendor's credential")
    var = getattr(kit.fake, "credential_var", None)
    if not var:  # a backend with no account (box_lite's boxes are made on this machine)
        not_applicable("the backend authenticates with no credential: its fake issues none")
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
