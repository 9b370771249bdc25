"""background: the process registry's detached jobs on a non-local backend.

drivers.Background replays spawn_via_env (one execute with timeout=10 and
rewrite_compound_background=False, the pid echoed back) and its poller
(kill -0, cat log, cat exit file) and kill (execute("kill <pid>")).

Jobs wait for a "go" file the check creates through exec instead of
sleeping for a fixed time, so a slow backend cannot make a job finish
before the check has looked at it, and a fast one does not wait for nothing.
"""

from __future__ import annotations

import shlex
import time

import pytest

from conformance.checks._support import nonce, out, rc, run
from conformance.host.drivers import Background, BackgroundJob

pytestmark = pytest.mark.usefixtures("kit")


def _gated(bg: Background, before: str, after: str) -> tuple[str, str]:
    """A job script that runs ``before``, waits (at most 60 s) for a go file, then runs ``after``."""
    go = f"{bg.tmp}/{nonce('go')}"
    wait = f"i=0; while [ ! -e {shlex.quote(go)} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done"
    return f"{before}; {wait}; {after}", go


def _spawn(bg: Background, command: str) -> tuple[BackgroundJob, float]:
    job, result, elapsed = bg.spawn(command)
    assert job is not None, (
        f"the background spawner got no numeric pid back (returncode {rc(result)}, output {out(result)[-300:]!r})"
    )
    return job, elapsed


def _release(env, go: str) -> None:
    result = run(env, f"touch {shlex.quote(go)}", timeout=10)
    assert rc(result) == 0, f"could not create the go file {go}: {out(result)!r}"


def _finish(bg: Background, job: BackgroundJob, go: str) -> None:
    """Let the job end by itself and stop it, whatever the check found."""
    try:
        run(bg.env, f"touch {shlex.quote(go)}", timeout=10)
    finally:
        bg.kill(job)


def _wait_until(predicate, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


@pytest.mark.clause("background.spawn")
def test_spawned_job_returns_a_pid_and_keeps_running(env):
    bg = Background(env)
    marker = nonce("bg")
    script, go = _gated(bg, f"echo {marker}-started", f"echo {marker}-after-return")
    job, elapsed = _spawn(bg, script)
    try:
        assert elapsed < 5, f"the spawn call took {elapsed:.1f}s; the background job held execute() open"
        assert bg.alive(job), f"pid {job.pid} is not running right after the spawn call returned"
        time.sleep(0.3)
        assert bg.alive(job), f"pid {job.pid} died within 0.3 s of the spawn call returning"
        assert bg.exit_status(job) is None, "the job already wrote an exit status; it did not outlive the call"
        # kill -0 also succeeds on an unreaped zombie: require work done after the call returned.
        _release(env, go)
        assert _wait_until(lambda: f"{marker}-after-return" in bg.log(job), 5), (
            f"the job never ran its part after the spawn call returned (log {bg.log(job)!r}); "
            "it was stopped when execute() returned"
        )
    finally:
        _finish(bg, job, go)


@pytest.mark.clause("background.poll")
def test_later_calls_see_the_job_its_log_and_exit_status(env):
    bg = Background(env)
    marker = nonce("poll")
    script, go = _gated(bg, f"echo {marker}-one", f"echo {marker}-two; exit 7")
    job, _ = _spawn(bg, script)
    try:
        assert bg.alive(job), f"kill -0 does not see pid {job.pid} right after the spawn"
        assert _wait_until(lambda: f"{marker}-one" in bg.log(job), 3), (
            f"while the job runs, cat {job.log} never shows its first line: {bg.log(job)!r}"
        )
        assert bg.alive(job), "kill -0 no longer sees the job although it is still waiting"
        assert bg.exit_status(job) is None, "an exit status exists while the job is still running"
        _release(env, go)
        assert _wait_until(lambda: bg.exit_status(job) is not None, 10, step=0.1), (
            f"the job never wrote its exit status to {job.exit_file}"
        )
        status = bg.exit_status(job)
        assert status == "7", f"the exit file holds {status!r}, expected the job's exit status 7"
        log = bg.log(job)
        assert f"{marker}-one" in log and f"{marker}-two" in log, f"the finished job's log is incomplete: {log!r}"
    finally:
        _finish(bg, job, go)


@pytest.mark.clause("background.kill")
def test_kill_stops_the_job(env):
    bg = Background(env)
    job, _ = _spawn(bg, "sleep 30")
    assert bg.alive(job), f"pid {job.pid} is not running after the spawn"
    result = bg.kill(job)
    assert rc(result) == 0, f"kill {job.pid} exited {rc(result)}: {out(result)!r}"
    # An orphaned job is reaped by the sandbox's init; allow it a few of its reaping rounds.
    assert _wait_until(lambda: not bg.alive(job), 5), f"kill -0 {job.pid} still succeeds 5 s after kill {job.pid}"
