"""Kills only the shell on timeout or interrupt, not its process group."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "a timeout kills the shell but leaves its children running"
# Scope: the kill checks, and background jobs, which a kill must leave alone.
SCOPE = "test_timeout or test_background"


class Env(TempdirBoxEnvironment):
    def _kill_process(self, proc):
        try:
            proc.kill()
        except OSError:
            pass


provider = provider_with(Env, "no_group_kill")
BREAKS = frozenset(
    {
        "timeout.kills-tree",
    }
)
