"""Stops the whole sandbox (every process of the box) to stop one timed-out command."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment, _kill_group

WHAT = "a timeout or interrupt kills everything in the box, background jobs included"
# Scope: the kill checks, and background jobs, which this mutant kills too.
SCOPE = "test_timeout or test_background"


class Env(TempdirBoxEnvironment):
    def _kill_process(self, proc):
        super()._kill_process(proc)
        with self._lock:
            groups = list(self._groups)
        for pgid in groups:
            _kill_group(pgid)


provider = provider_with(Env, "stops_sandbox_on_timeout")
BREAKS = frozenset(
    {
        "timeout.command-not-sandbox",
    }
)
