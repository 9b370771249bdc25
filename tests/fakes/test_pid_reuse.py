"""A command's process group id outlives the command, and pids are recycled.

Boxes (fakes.world) and tempdir_box environments remember the groups they
started and SIGKILL them on delete/cleanup.  Once a group has ended and the
number names another command's group (pid_max is often 32768, so this happens
within minutes under a busy test run), that kill must not reach it: in CI it
killed another backend's running command (exit 137 in the session machine).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fakes.world import World

NS_LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _wait_dead(proc: subprocess.Popen, limit: float = 2.0) -> int | None:
    end = time.monotonic() + limit
    while time.monotonic() < end and proc.poll() is None:
        time.sleep(0.02)
    return proc.poll()


def _reuse(pid: int, spawn: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """Start a new session leader with ``pid`` (a free number) through ns_last_pid; root only."""
    if not os.access(NS_LAST_PID, os.W_OK):
        pytest.skip("needs a writable /proc/sys/kernel/ns_last_pid (root) to recycle a pid on purpose")
    for _ in range(50):  # another process on the machine may take the number first
        NS_LAST_PID.write_text(str(pid - 1))
        proc = spawn()
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    pytest.skip(f"pid {pid} was taken by someone else every time")


@pytest.fixture(params=[False, True], ids=["host", "isolated"])
def world(request, tmp_path):
    if request.param:
        probe = World(tmp_path / "probe")
        probe.close()
        if not probe.isolated:
            pytest.skip(f"no usable namespaces here: {probe.paths_note}")
    w = World(tmp_path / "world", namespaces=request.param)
    yield w
    w.close()


def test_deleting_a_box_spares_a_group_that_took_an_old_commands_pid(world):
    a, b = world.create(name="a"), world.create(name="b")
    old = world.spawn(a, cmd="true", login=False)
    assert old.wait(5) == 0
    victim = world.spawn(b, cmd="sleep 30", login=False)
    old.pid = victim.pid  # the number now names box b's running command, as after a recycle
    world.delete(a)
    assert _wait_dead(victim.popen, 0.5) is None, "deleting box a killed box b's command"
    world.delete(b)
    assert _wait_dead(victim.popen) is not None


def test_deleting_a_box_still_kills_its_detached_jobs(world):
    box = world.create(name="a")
    proc = world.spawn(box, cmd="sleep 30 >/dev/null 2>&1 & echo $!", login=False)
    out, _ = proc.popen.communicate(timeout=5)  # the leader exits and is reaped; its job keeps the group
    job = world.host_pid(box, int(out))  # this machine's pid (an isolated box numbers its own)
    assert job is not None
    world.delete(box)
    end = time.monotonic() + 2
    while time.monotonic() < end and Path(f"/proc/{job}").exists():
        time.sleep(0.02)
    assert not Path(f"/proc/{job}").exists(), "the detached job outlived its deleted box"


def test_deleting_a_box_spares_a_real_recycled_pid(world):
    a, b = world.create(name="a"), world.create(name="b")
    old = world.spawn(a, cmd="true", login=False)
    assert old.wait(5) == 0
    victim = _reuse(old.pid, lambda: world.spawn(b, cmd="sleep 30", login=False).popen)
    world.delete(a)
    assert _wait_dead(victim, 0.5) is None, "deleting box a killed box b's command"


@pytest.mark.usefixtures("builtin_host")
def test_tempdir_cleanup_spares_a_recycled_pid(tmp_path, monkeypatch):
    monkeypatch.setenv("TEMPDIR_BOX_ROOT", str(tmp_path / "boxes"))
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    env = TempdirBoxProvider().create_environment(
        cwd="", timeout=30, task_id="pid-reuse", container_config={"container_persistent": False}
    )
    try:
        result = env.execute("echo $$")  # bash -c is the group leader
        assert result["returncode"] == 0, result
        leader = int(result["output"].split()[-1])
        victim = _reuse(leader, lambda: subprocess.Popen(["sleep", "30"], start_new_session=True))
        try:
            env.cleanup()
            assert _wait_dead(victim, 0.5) is None, "cleanup killed a group that only shares an old pid"
        finally:
            victim.kill()
            victim.wait()
    finally:
        env.cleanup()
