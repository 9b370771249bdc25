"""exec: execute_code's remote session kernel, a detached runner reused across tool calls.

conformance.host.kernel replays the host's calls: a private directory, files
shipped through stdin, a ``nohup python3 ... &`` launch from execute(cwd="/")
that must return while the runner lives on, ``kill -0`` before each cell,
and ``pkill -TERM -P`` / ``kill`` / ``rm -rf`` to end it.  Between the two
cells the environment runs other commands and then sits idle, as a
conversation does between execute_code calls.
"""

from __future__ import annotations

import shlex
import time

import pytest

from conformance.checks._support import out, rc, run
from conformance.host.kernel import RemoteKernel, process_gone

pytestmark = pytest.mark.usefixtures("kit")

IDLE_S = 2.0  # a pause with no command in flight, as between two tool calls

FIRST_CELL = """\
import os, subprocess
kept = 41
child = subprocess.Popen(["sleep", "300"])
print("pids", os.getpid(), child.pid)
"""


def _wait_gone(env, pid: str, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process_gone(env, pid):
            return True
        time.sleep(0.2)
    return process_gone(env, pid)


@pytest.mark.clause("exec.remote-kernel")
def test_detached_kernel_keeps_its_state_across_calls(env):
    # A launch call held open by the detached runner runs into its 20 s timeout, which stops the
    # runner: the spawn then fails on kill -0 with the runner's log in the message.
    kernel, why = RemoteKernel.spawn(env)
    assert kernel is not None, f"the remote kernel could not be started: {why}"
    try:
        first = kernel.cell(FIRST_CELL)
        assert first.status == "ok", f"the first cell did not run in the kernel: {first.status} {first.payload}"
        words = first.payload.get("stdout", "").split()
        assert len(words) == 3 and words[0] == "pids", f"the first cell printed {first.payload.get('stdout')!r}"
        runner_pid, child_pid = words[1], words[2]
        assert runner_pid == kernel.pid, f"the cell ran in pid {runner_pid}, not in the runner {kernel.pid}"

        # Other tool calls, then an idle pause: the runner must outlive both.
        for i in range(3):
            result = run(env, f"echo between-{i}", cwd=env.cwd)
            assert out(result).strip() == f"between-{i}", f"a command between two cells failed: {result!r}"
        time.sleep(IDLE_S)
        assert kernel.alive(), (
            f"kill -0 {kernel.pid} fails: the detached kernel runner did not survive later execute() calls "
            f"and {IDLE_S:g}s without a command (Hermes would report the kernel's state as lost)"
        )
        second = kernel.cell("print(kept + 1, os.getpid())")
        assert second.status == "ok", (
            f"the second cell did not run in the surviving kernel: {second.status} {second.payload}"
        )
        assert second.payload.get("stdout", "").split() == ["42", kernel.pid], (
            f"the second cell printed {second.payload.get('stdout')!r}; the kernel lost the state of the first cell"
        )
        mode = run(env, f"stat -c %a {shlex.quote(kernel.kernel_dir)}/runner.log", cwd="/")
        assert rc(mode) == 0 and out(mode).strip() == "600", (
            f"runner.log should be mode 600 after touch and chmod 600: {out(mode)!r}"
        )
    except BaseException:
        kernel.kill()
        raise
    kernel.kill()
    assert _wait_gone(env, kernel.pid), f"the kernel runner {kernel.pid} still runs after kill {kernel.pid}"
    assert _wait_gone(env, child_pid), f"the runner's child {child_pid} still runs after pkill -TERM -P {kernel.pid}"
    left = run(env, f"test -e {shlex.quote(kernel.kernel_dir)} && echo present || echo absent", cwd="/")
    assert out(left).strip() == "absent", f"rm -rf left the kernel directory {kernel.kernel_dir} behind"
