"""tempdir_box whose sandbox reaps detached processes once no command has run for a second.

Some sandboxes suspend or recycle their process tree when nothing is executing;
a background job polled every few hundred milliseconds survives that, but
execute_code's session kernel, idle between two tool calls, does not.
"""

import threading
import time
from typing import Any

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment, _kill_group

WHAT = "detached processes are killed when the sandbox has been idle for 1 s, so the remote kernel dies between calls"
SCOPE = "test_kernel or test_background or test_timeout or test_output or test_exec_code"
IDLE_REAP_S = 1.0


class Env(TempdirBoxEnvironment):
    _idle_lock = threading.Lock()

    def execute(self, command: str, cwd: str = "", **kwargs: Any) -> dict[str, Any]:
        with self._idle_lock:
            in_flight = getattr(self, "_in_flight", 0)
            last_end = getattr(self, "_last_end", None)
            if not in_flight and last_end is not None and time.monotonic() - last_end > IDLE_REAP_S:
                with self._lock:
                    groups = list(self._groups)
                for leader in groups:  # everything left running from earlier commands
                    _kill_group(leader)
            self._in_flight = in_flight + 1
        try:
            return super().execute(command, cwd, **kwargs)
        finally:
            with self._idle_lock:
                self._in_flight -= 1
                self._last_end = time.monotonic()


provider = provider_with(Env, "kernel_runner_killed")
BREAKS = frozenset(
    {
        "exec.remote-kernel",
    }
)
