"""timeout: timed-out and interrupted commands stop, report, and leave the environment usable."""

from __future__ import annotations

import shlex
import time

import pytest

from conformance import persistent_path
from conformance.checks._support import attempt, nonce, out, plant, rc, run, stop_by
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
        f"timed-out output does not end with '[Command timed out after 1s]': {out(result)[-120:]!r}"
    )


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
        f"interrupted output does not end with '[Command interrupted]': {out(result)[-120:]!r}"
    )


@pytest.mark.clause("timeout.usable-after")
def test_environment_works_after_a_kill(make_env):
    def scenario(env, how):
        stop_by(env, how, "echo started; sleep 30")
        mark = nonce("after")
        code, text, _ = attempt(env, f"echo {mark}", timeout=15)
        assert code == 0 and text.strip() == mark, (
            f"the first execute() after a {how} failed: "
            f"{'it raised ' + text[:300] if code is None else f'rc {code}, output {text[-300:]!r}'}"
        )

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
    "for s in /proc/[0-9]*/stat; do c=${{s#/proc/}}; c=${{c%/stat}}; "
    '[ "$(sed "s/^.*) //" "$s" 2>/dev/null | cut -d" " -f2)" = "$p" ] && kill -KILL "$c" 2>/dev/null; done; '
    'kill -KILL "$p" 2>/dev/null; fi; rm -rf {d}; sleep 0.1; rm -rf {d}'
)


def _end_tree(env, d: str) -> None:
    try:
        run(env, _END_TREE.format(d=d), cwd="/", timeout=10)
    except Exception:
        pass  # the environment is broken; the run's end sweeps what is left


class _Life:
    """What shows that the sandbox itself kept running across a kill: none of these may change.

    A file in /tmp (a stopped sandbox starts with an empty one), the start time
    of the sandbox's pid 1 (a restarted sandbox has a new one), the world's
    state of the sandbox when the run has a world, and the next command itself
    (it must neither fail nor report environment_recreated).  The first two
    count only where they hold between two plain commands.
    """

    _INIT_START = "sed 's/^.*) //' /proc/1/stat 2>/dev/null | cut -d' ' -f20"
    _PROBE = "{ cat {marker} 2>/dev/null || printf kit-absent; }; echo; " + _INIT_START

    def __init__(self, kit, env) -> None:
        self.kit, self.env = kit, env
        self.value = nonce("life")
        self.marker = f"/tmp/.{self.value}"
        self.sandbox = self.state = None
        world = kit.world
        if world is not None:
            relpath, value = plant(env, "life")
            self.sandbox = world.locate(relpath, value)
            self.state = world.sandboxes().get(self.sandbox) if self.sandbox else None
        made = run(
            env,
            f"printf '%s' {self.value} > {self.marker} && echo ok || echo no; {self._INIT_START}",
            cwd="/",
            timeout=10,
        )
        lines = out(made).split()
        self.marked = rc(made) == 0 and lines[:1] == ["ok"]
        self.init_start = lines[1] if len(lines) >= 2 and lines[1].isdigit() else None
        self._keep_only_what_lasts()

    def _keep_only_what_lasts(self) -> None:
        """A sign counts only if it holds between two plain commands: a backend that gives every command a
        fresh namespace (a private /tmp, its own pid 1) shows both change without any kill."""
        if not (self.marked or self.init_start):
            return
        seen = run(self.env, self._PROBE.replace("{marker}", self.marker), cwd="/", timeout=10)
        lines = out(seen).split()
        if rc(seen) != 0 or lines[:1] != [self.value]:
            self.marked = False  # /tmp does not outlast a command here
        if rc(seen) != 0 or lines[-1:] != [self.init_start]:
            self.init_start = None  # every command has its own pid 1

    def stopped(self) -> str | None:
        """How the sandbox shows it was stopped (or replaced) since it was noted; None when it kept running."""
        try:
            result = run(self.env, self._PROBE.replace("{marker}", self.marker), cwd="/", timeout=15)
        except AssertionError:
            raise
        except Exception as exc:
            return f"the next command raised {type(exc).__name__}: {str(exc)[:200]}"
        if rc(result) != 0:
            return f"the next command failed with returncode {rc(result)}: {out(result)[-200:]!r}"
        if result.get("environment_recreated") is True:
            return "the next command reported environment_recreated: the sandbox was replaced"
        lines = out(result).split()
        if self.marked and lines[:1] != [self.value]:
            return f"a file written to {self.marker} just before is gone"
        if self.init_start and lines[-1:] != [self.init_start]:
            return "the sandbox's pid 1 is a new process: the sandbox was restarted"
        if self.sandbox is not None:
            state = self.kit.world.sandboxes().get(self.sandbox)
            if state != self.state:
                return f"the harness sees the sandbox {state or 'gone'} (it was {self.state})"
        return None

    def remove(self) -> None:
        if self.marked:
            try:
                run(self.env, f"rm -f {self.marker}", cwd="/", timeout=10)
            except Exception:
                pass  # the environment is broken; the run's end sweeps what is left


@pytest.mark.clause("timeout.kills-tree")
def test_killed_command_leaves_no_process(kit, make_env):
    def scenario(env, how):
        # The check's files live in the workspace (the directory the backend keeps), not in /tmp: a
        # backend that stops the sandbox is then seen to do so, not mistaken for a child that never ran.
        place = persistent_path.of(kit, env).shell()
        made = run(env, f"mkdir -p {place} && mktemp -d {place}/.kit-tree.XXXXXX", cwd="/")
        assert rc(made) == 0 and out(made).strip(), f"mktemp -d in the workspace {place} failed: {out(made)!r}"
        d = shlex.quote(out(made).strip().splitlines()[-1])
        life = _Life(kit, env)
        try:
            _killed_tree_is_gone(env, how, d, life)
        finally:
            _end_tree(env, d)
            life.remove()

    _each_kill(make_env, scenario)


def _killed_tree_is_gone(env, how: str, d: str, life: _Life) -> None:
    """Start a heartbeat tree in ``d``, stop its command by ``how``, and assert the whole tree stopped."""
    # A foreground child (sh) that keeps starting grandchildren (sleep) and writes a heartbeat.
    command = (
        'sh -c \'echo $$ > "$1/pid"; while :; do echo beat >> "$1/hb"; sleep 0.05; done\' '
        f"kit-tree {d}; echo late > {d}/late"
    )
    stop_by(env, how, command)

    stopped = life.stopped()
    assert stopped is None, (
        f"the {how} stopped the whole sandbox, not only the command's processes: {stopped}; kill the command's "
        "process group (or its remote session) and leave the sandbox running"
    )
    deadline = time.monotonic() + 2
    while True:
        state = out(run(env, _STATE.format(d=d), cwd="/", timeout=10)).strip()
        if state == "gone" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert state != "nopid", (
        f"setup: the command's child never wrote its pid file ({d}/pid) before the {how}, in a sandbox that kept "
        "running"
    )
    assert state == "gone", f"the foreground child of a command stopped by {how} is still running ({state})"

    probe = f"wc -c < {d}/hb; [ -e {d}/late ] && echo LATE"
    first = out(run(env, probe, cwd="/", timeout=10)).split()
    time.sleep(0.25)  # five heartbeats' worth
    second = out(run(env, probe, cwd="/", timeout=10)).split()
    assert first == second, (
        f"after the {how} the command's processes still write their heartbeat ({first} -> {second} bytes)"
    )
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
            f"execute() without timeout raised {type(exc).__name__} after {elapsed:.1f}s: {exc}"
        )
        return
    elapsed = time.monotonic() - started
    assert elapsed < 5, (
        f"execute('sleep 20') without timeout ran {elapsed:.1f}s; the create-time timeout of 1 s was not the default"
    )
    assert rc(result) == 124 or "timed out" in out(result).lower(), (
        f"execute('sleep 20') without timeout did not report a timeout: rc {rc(result)}, {out(result)[-120:]!r}"
    )


@pytest.mark.clause("timeout.command-not-sandbox")
def test_a_kill_leaves_the_sandbox_alone(make_env):
    def scenario(env, how):
        bg = Background(env)
        mark = nonce("keep")
        assert rc(run(env, f'echo {mark} > "$HOME"/{mark}')) == 0
        job, _, _ = bg.spawn("sleep 60")
        assert job is not None, "the background job did not start"
        try:
            stop_by(env, how, "echo started; sleep 30")
            code, seen, _ = attempt(env, f'cat "$HOME"/{mark}')
            assert code is not None, (
                f"after the {how} the sandbox no longer runs commands: execute() raised {seen[:300]}"
            )
            assert seen.strip() == mark, (
                f"after the {how} a file written earlier in $HOME is gone (rc {code}, {seen[-200:]!r}): the "
                "backend stopped, reset or replaced the sandbox to end one command"
            )
            assert bg.alive(job), f"the {how} stopped a background job of the same sandbox"
        finally:
            bg.kill(job)

    _each_kill(make_env, scenario)
