"""A local backend that leaks: a timeout or interrupt kills only the shell, and cleanup removes the
box's files but never kills what its commands started.

Everything a check leaves running (a killed command's children, a heartbeat loop, a detached job)
keeps running after its environment is gone.  tests/test_cleanup.py runs the suite against it and
checks that the kit itself leaves no process and no file behind.
"""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "timeouts kill only the shell and cleanup leaves every process of the box running"
# Scope: the kill checks, and the background-job and cleanup checks, whose processes it also leaves running.
SCOPE = "test_timeout or test_background or test_lifecycle"


class Env(TempdirBoxEnvironment):
    def _kill_process(self, proc):
        try:
            proc.kill()
        except OSError:
            pass

    def cleanup(self):  # type: ignore[override]  # no force_remove: adding it would change how the host calls it
        with self._lock:
            self._groups = []  # forget the process groups: cleanup kills nothing
        super().cleanup()


provider = provider_with(Env, "leaves_processes")
BREAKS = frozenset(
    {
        "timeout.kills-tree",
    }
)
