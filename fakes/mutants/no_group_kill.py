"""Kills only the shell on timeout or interrupt, not its process group."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "a timeout kills the shell but leaves its children running"


class Env(TempdirBoxEnvironment):
    def _kill_process(self, proc):
        try:
            proc.kill()
        except OSError:
            pass


provider = provider_with(Env, "no_group_kill")
BREAKS = frozenset({
    "timeout.kills-tree",
})
