"""timeout: timed-out and interrupted commands stop, report, and leave the environment usable."""

from __future__ import annotations

import shlex
import time

import pytest

from conformance.checks._support import nonce, out, rc, run, stop_by
from conformance.host.calls import Call, bounded
from conformance.host.drivers import Background, interrupted

pytestmark = pytest.mark.usefixtures("kit")

KILLS = ("timeout", "interrupt")


def _each_kill(make_env, scenario) -> None:
    """Run scenario(env, how) for a timeout and for an interrupt at once, each in a fresh environment."""
    calls = {how: Call(scenario, make_env(), how) for how in KILLS}
    for how, call in calls.items():
        call.result(60, what=f"the {how} scenario")


@pytest.mark.clause("timeout.result-124")
def test_timeout_returns_124_promptly(env):
    started = time.monotonic()
    result = run(env, "sleep 30", timeout=1)
    elapsed = time.monotonic() - started
    assert elapsed < 4, f"execute('sleep 30', timeout=1) returned after {elapsed:.1f}s, not within timeout + 3 s"
    assert rc(result) == 124, f"a timed-out command returned {rc(result)}, not 124: {out(result)!r}"
    assert out(result).endswith("[Command timed out after 1s]"), (
        f"timed-out output does not end with '[Command timed out after 1s]': {out(result)[-120:]!r}")


@pytest.mark.clause("timeout.partial-output")
def test_output_before_timeout_is_kept(env):
    mark = nonce("partial")
    result = stop_by(env, "timeout", f"echo {mark}; echo {mark}-err >&2; sleep 30")
    text = out(result)
    assert mark in text and f"{mark}-err" in text, f"output printed before the timeout was lost: {text!r}"
    notice = text.rfind("[Command timed out")
    assert notice == -1 or text.index(mark) < notice, f"the partial output is not before the notice: {text!r}"


@pytest.mark.clause("timeout.interrupt-130")
def test_interrupt_returns_130(env):
    mark = nonce("before")
    result, after_raise = interrupted(env, f"echo {mark}; sleep 30", after_s=0.3, timeout=30)
    assert after_raise < 2, f"the interrupted command ran on for {after_raise:.1f}s after the interrupt"
    assert rc(result) == 130, f"an interrupted command returned {rc(result)}, not 130: {out(result)!r}"
    assert out(result).endswith("[Command interrupted]"), (
        f"interrupted output does not end with '[Command interrupted]': {out(result)[-120:]!r}")


@pytest.mark.clause("timeout.usable-after")
def test_environment_works_after_a_kill(make_env):
    def scenario(env, how):
        stop_by(env, how, "echo started; sleep 30")
        mark = nonce("after")
        result = run(env, f"echo {mark}", timeout=15)
        assert rc(result) == 0 and out(result).strip() == mark, (
            f"the first execute() after a {how} failed: rc {rc(result)}, output {out(result)!r}")

    _each_kill(make_env, scenario)


_STATE = (
    'p=$(cat {d}/pid 2>/dev/null); [ -n "$p" ] || {{ echo nopid; exit 0; }}; '
    'if [ -r "/proc/$p/stat" ]; then s=$(sed "s/^.*) //" "/proc/$p/stat" | cut -c1); '
    '[ "$s" = Z ] && echo gone || echo "alive:$p:$s"; '
    'elif kill -0 "$p" 2>/dev/null; then echo "alive:$p"; else echo gone; fi'
)


# Ends the heartbeat tree a check recorded (the loop stopped first, so it starts no new child) and
# removes its directory: the check cleans up after itself even when the backend failed to kill it.
_END_TREE = (
    'p=$(cat {d}/pid 2>/dev/null); if [ -n "$p" ]; then kill -STOP "$p" 2>/dev/null; '
    'for s in /proc/[0-9]*/stat; do c=${{s#/proc/}}; c=${{c%/stat}}; '
    '[ "$(sed "s/^.*) //" "$s" 2>/dev/null | cut -d" " -f2)" = "$p" ] && kill -KILL "$c" 2>/dev/null; done; '
    'kill -KILL "$p" 2>/dev/null; fi; rm -rf {d}; sleep 0.1; rm -rf {d}'
)


def _end_tree(env, d: str) -> None:
    try:
        run(env, _END_TREE.format(d=d), cwd="/", timeout=10)
    except Exception:
        pass  # the environment is broken; the run's end sweeps what is left


@pytest.mark.clause("timeout.kills-tree")
def test_killed_command_leaves_no_process(make_env):
    def scenario(env, how):
        made = run(env, 'mktemp -d "${TMPDIR:-/tmp}/kit-tree.XXXXXX"', cwd="/")
        assert rc(made) == 0 and out(made).strip(), f"mktemp -d failed: {out(made)!r}"
        d = shlex.quote(out(made).strip())
        try:
            _killed_tree_is_gone(env, how, d)
        finally:
            _end_tree(env, d)

    _each_kill(make_env, scenario)


def _killed_tree_is_gone(env, how: str, d: str) -> None:
    """Start a heartbeat tree in ``d``, stop its command by ``how``, and assert the whole tree stopped."""
    # A foreground child (sh) that keeps starting grandchildren (sleep) and writes a heartbeat.
    command = ("sh -c 'echo $$ > \"$1/pid\"; while :; do echo beat >> \"$1/hb\"; sleep 0.05; done' "
               f"kit-tree {d}; echo late > {d}/late")
    stop_by(env, how, command)

    deadline = time.monotonic() + 2
    while True:
        state = out(run(env, _STATE.format(d=d), cwd="/", timeout=10)).strip()
        if state == "gone" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert state != "nopid", f"setup: the child never started before the {how}"
    assert state == "gone", f"the foreground child of a command stopped by {how} is still running ({state})"

    probe = f"wc -c < {d}/hb; [ -e {d}/late ] && echo LATE"
    first = out(run(env, probe, cwd="/", timeout=10)).split()
    time.sleep(0.25)  # five heartbeats' worth
    second = out(run(env, probe, cwd="/", timeout=10)).split()
    assert first == second, (
        f"after the {how} the command's processes still write their heartbeat ({first} -> {second} bytes)")
    assert "LATE" not in second, f"after the {how} the killed command's shell carried on and ran its next command"


@pytest.mark.clause("timeout.default-from-create")
def test_create_timeout_is_the_default(make_env):
    env = make_env(timeout=1)
    quick = bounded(env.execute, "echo quick", deadline=15, what="execute('echo quick') without timeout")
    assert out(quick).strip() == "quick", f"a quick command failed under a 1 s default timeout: {quick!r}"
    started = time.monotonic()
    try:
        result = bounded(env.execute, "sleep 20", deadline=15, what="execute('sleep 20') without timeout")
    except AssertionError:
        raise
    except Exception as exc:  # a duck type may raise; Hermes maps a "timeout" exception to 124
        elapsed = time.monotonic() - started
        assert "time" in str(exc).lower() and elapsed < 5, (
            f"execute() without timeout raised {type(exc).__name__} after {elapsed:.1f}s: {exc}")
        return
    elapsed = time.monotonic() - started
    assert elapsed < 5, (
        f"execute('sleep 20') without timeout ran {elapsed:.1f}s; the create-time timeout of 1 s was not the default")
    assert rc(result) == 124 or "timed out" in out(result).lower(), (
        f"execute('sleep 20') without timeout did not report a timeout: rc {rc(result)}, {out(result)[-120:]!r}")


@pytest.mark.clause("timeout.command-not-sandbox")
def test_a_kill_leaves_the_sandbox_alone(make_env):
    def scenario(env, how):
        bg = Background(env)
        mark = nonce("keep")
        assert rc(run(env, f"echo {mark} > \"$HOME\"/{mark}")) == 0
        job, _, _ = bg.spawn("sleep 60")
        assert job is not None, "the background job did not start"
        try:
            stop_by(env, how, "echo started; sleep 30")
            assert bg.alive(job), f"the {how} stopped a background job of the same sandbox"
            seen = out(run(env, f"cat \"$HOME\"/{mark}")).strip()
            assert seen == mark, f"after the {how} a file written earlier is gone ({seen!r})"
        finally:
            bg.kill(job)

    _each_kill(make_env, scenario)
