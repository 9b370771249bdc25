"""Replaces a deleted box silently: the command runs and nobody is told."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "a box deleted behind its back is recreated without environment_recreated"
# Scope: both checks of deleted-replaced (world and black-box), and the other deleted-sandbox checks.
SCOPE = "test_persist or test_black_box or test_faults"


class Env(TempdirBoxEnvironment):
    def _before_execute(self):
        if self._box.state() == "deleted":
            self._box.create(task_id=self._task_id, persistent=self._persistent, owner=self._owner)
            self._snapshot_ready = False
            self.init_session()
        super()._before_execute()


provider = provider_with(Env, "silent_recreate")
BREAKS = frozenset(
    {
        "persist.deleted-replaced",
    }
)
