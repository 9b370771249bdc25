"""cwd: where commands run, and how the host tracks a cd."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from conformance.checks._support import nonce, out, rc, run, stop_by
from conformance.host.calls import Call
from conformance.host.drivers import TerminalSession, terminal
from conformance.host.factory import HERMES_DEFAULT_CWD

pytestmark = pytest.mark.usefixtures("kit")

MARKER_PREFIX = "__HERMES_CWD_"
ODD_NAMES = ("with space", "it's", "-leading-dash", "-x 'q' \"dq\" & $(echo no) ü")


def _physical(env, path_expr: str) -> str:
    """`pwd -P` of a directory, resolved inside the sandbox (path_expr is shell text; env.cwd stays)."""
    result = run(env, f"(builtin cd -- {path_expr} && pwd -P)", cwd="/")
    assert rc(result) == 0, f"cannot cd to {path_expr} in the sandbox: {out(result)!r}"
    return out(result).strip()


def _new_dir(env, label: str = "cwd") -> str:
    """A fresh directory in the sandbox; its physical path."""
    result = run(
        env, f'd=$(mktemp -d "${{TMPDIR:-/tmp}}/kit-{label}.XXXXXX") && (builtin cd -- "$d" && pwd -P)', cwd="/"
    )
    assert rc(result) == 0 and out(result).strip(), f"mktemp -d failed in the sandbox: {out(result)!r}"
    return out(result).strip()


def _home_dir(env, name: str) -> tuple[str, str]:
    """Create $HOME/<name>; return (physical $HOME, physical $HOME/<name>)."""
    result = run(env, f'mkdir -p -- "$HOME"/{shlex.quote(name)}', cwd="/")
    assert rc(result) == 0, f"cannot create $HOME/{name}: {out(result)!r}"
    return _physical(env, '"$HOME"'), _physical(env, f'"$HOME"/{shlex.quote(name)}')


@pytest.mark.clause("cwd.explicit")
def test_explicit_cwd_is_honoured(env):
    target = _new_dir(env, "explicit")
    got = out(run(env, "pwd -P", cwd=target)).strip()
    assert got == target, f"execute('pwd -P', cwd={target!r}) ran in {got!r}"

    sub = nonce("sub")
    home, home_sub = _home_dir(env, sub)
    got = out(run(env, "pwd -P", cwd="~")).strip()
    assert got == home, f"cwd='~' ran in {got!r}, not the sandbox's $HOME {home!r}"
    got = out(run(env, "pwd -P", cwd=f"~/{sub}")).strip()
    assert got == home_sub, f"cwd='~/{sub}' ran in {got!r}, not {home_sub!r}"


@pytest.mark.clause("cwd.env-attr")
def test_cd_updates_env_cwd(env):
    for target in (_new_dir(env, "attr"), _home_dir(env, nonce("attr"))[1]):
        result = run(env, f"cd -- {shlex.quote(target)}", cwd="/")
        assert rc(result) == 0, f"cd {target} failed: {out(result)!r}"
        assert env.cwd == target, f"after execute('cd {target}') env.cwd is {env.cwd!r}"


@pytest.mark.clause("cwd.observed")
def test_result_reports_observed_cwd(env):
    target = _new_dir(env, "observed")
    result = run(env, f"cd -- {shlex.quote(target)}", cwd="/")
    assert result.get("cwd_observed") is True, (
        f"after a cd the result has cwd_observed={result.get('cwd_observed')!r} (keys: {sorted(result)})"
    )
    assert result.get("cwd") == target, f"result cwd is {result.get('cwd')!r}, expected {target!r}"


@pytest.mark.clause("cwd.terminal-keeps-cd")
def test_terminal_call_keeps_cd(env):
    target = _new_dir(env, "terminal")
    session = TerminalSession()
    first = terminal(env, f"cd -- {shlex.quote(target)}", session, timeout=10)
    assert first.exit_code == 0, f"cd through the terminal driver failed: {first.output!r} {first.error}"
    second = terminal(env, "pwd -P", session, timeout=10)
    assert second.output.strip() == target, (
        f"the terminal call after 'cd {target}' ran in {second.output.strip()!r}; the host did not keep the cd "
        f"(session cwd recorded: {session.cwd!r})"
    )


@pytest.mark.clause("cwd.marker-hidden")
def test_marker_never_in_output(env):
    cases: list[tuple[str, dict[str, Any]]] = [
        ("printf abc", {}),
        ("true", {}),
        ("echo line; echo err >&2", {}),
        ("printf 'no newline\\r'", {}),
        ("exit 3", {}),
        ("cd /; echo moved", {}),
        ("cat", {"stdin_data": "from stdin without newline"}),
        ("seq 1 30000", {"bounded_capture": True}),
        ("seq 1 30000", {"bounded_capture": False}),
    ]
    for command, kwargs in cases:
        result = run(env, command, **kwargs)
        text = out(result)
        assert MARKER_PREFIX not in text, (
            f"{command!r} returned the cwd marker in its output:"
            f" ...{text[max(0, text.find(MARKER_PREFIX) - 40) :][:160]!r}"
        )


@pytest.mark.clause("cwd.killed-unchanged")
def test_killed_command_does_not_move_cwd(make_env):
    def scenario(env, how):
        elsewhere = _new_dir(env, "elsewhere")
        before = env.cwd
        result = stop_by(env, how, f"cd -- {shlex.quote(elsewhere)} && echo moved; sleep 5")
        assert env.cwd == before, f"a command killed by {how} after cd moved env.cwd from {before!r} to {env.cwd!r}"
        assert not result.get("cwd_observed"), f"a command killed by {how} set cwd_observed: {result!r}"

    # The statement names a timeout; an interrupt kills the same way. Both run at once.
    calls = {how: Call(scenario, make_env(), how) for how in ("timeout", "interrupt")}
    for how, call in calls.items():
        call.result(60, what=f"the {how} scenario")


@pytest.mark.clause("cwd.missing-dir")
def test_missing_cwd_fails_without_running(env):
    for missing in ("/kit-missing-{n}/sub", "~/kit-missing-{n}"):
        n = nonce("missing")
        cwd = missing.format(n=n)
        flag = f"kit-flag-{n}"
        result = run(env, f'echo ran > "$HOME"/{flag}; echo ran-{n}', cwd=cwd)
        assert rc(result) != 0, f"execute(cwd={cwd!r}) of a missing directory returned 0: {out(result)!r}"
        assert f"ran-{n}" not in out(result), f"the command ran although cwd={cwd!r} does not exist: {out(result)!r}"
        check = run(env, f'[ -e "$HOME"/{flag} ] && echo present || echo absent', cwd="/")
        assert out(check).strip() == "absent", f"the command had an effect although cwd={cwd!r} does not exist"


@pytest.mark.clause("cwd.default")
def test_empty_cwd_means_env_cwd(env):
    target = _new_dir(env, "default")
    env.cwd = target  # what the host does when a session's workspace changes
    got = out(run(env, "pwd -P", cwd="")).strip()
    assert got == target, f"execute(cwd='') ran in {got!r}, not env.cwd {target!r}"
    got = out(run(env, "pwd -P")).strip()
    assert got == target, f"execute() without cwd ran in {got!r}, not env.cwd {target!r}"


@pytest.mark.clause("cwd.initial")
@pytest.mark.parametrize("start", ["/", "/tmp"])
def test_new_environment_starts_in_given_cwd(make_env, start):
    env = make_env(cwd=start)
    first = run(env, "pwd -P")
    assert rc(first) == 0, f"first command failed: {out(first)!r}"
    expected = _physical(env, shlex.quote(start))
    assert out(first).strip() == expected, (
        f"the first command of an environment created with cwd={start!r} ran in {out(first).strip()!r}"
    )


@pytest.mark.clause("cwd.hermes-default")
def test_hermess_default_root_cwd_runs_commands(make_env):
    env = make_env(cwd=HERMES_DEFAULT_CWD)
    created = run(env, "echo started")
    assert rc(created) == 0 and out(created).strip() == "started", (
        f"an environment created with Hermes's default cwd={HERMES_DEFAULT_CWD!r} cannot run a command: "
        f"rc {rc(created)}, {out(created)[-300:]!r}"
    )
    sent = run(env, "echo sent", cwd=HERMES_DEFAULT_CWD)
    assert rc(sent) == 0 and out(sent).strip() == "sent", (
        f"execute(cmd, cwd={HERMES_DEFAULT_CWD!r}), as Hermes's terminal tool sends each command when terminal.cwd "
        f"is unset, failed: rc {rc(sent)}, {out(sent)[-300:]!r}"
    )


@pytest.mark.clause("cwd.odd-names")
def test_odd_directory_names(env):
    base = _new_dir(env, "odd")
    for name in ODD_NAMES:
        q = shlex.quote(name)
        made = run(env, f'mkdir -p -- {q} "$HOME"/{q}', cwd=base)
        assert rc(made) == 0, f"cannot create {name!r}: {out(made)!r}"
        path = f"{base}/{name}"

        got = out(run(env, "pwd -P", cwd=path)).strip()
        assert got == path, f"execute(cwd={path!r}) ran in {got!r}"

        result = run(env, f"cd -- {q}", cwd=base)
        assert rc(result) == 0, f"cd -- {name!r} failed: {out(result)!r}"
        assert env.cwd == path, f"after cd into {name!r} env.cwd is {env.cwd!r}, expected {path!r}"
        got = out(run(env, "pwd -P")).strip()
        assert got == path, f"the call after cd into {name!r} ran in {got!r}"

        home_path = _physical(env, f'"$HOME"/{q}')
        got = out(run(env, "pwd -P", cwd=f"~/{name}")).strip()
        assert got == home_path, f"execute(cwd={'~/' + name!r}) ran in {got!r}, expected {home_path!r}"
