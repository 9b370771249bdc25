"""Cleans up by deleting every box of its task id, not only its own."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.boxes import list_boxes
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "cleanup() deletes by task id (a list call), taking other sessions' boxes with it"
# Scope: both checks of delete-own-only (world and black-box), and the task-id isolation and persistence
# checks that share sandboxes between sessions.
SCOPE = "test_lifecycle or test_black_box or test_identity or test_persist"


class Env(TempdirBoxEnvironment):
    def cleanup(self):  # type: ignore[override]  # no force_remove: adding it would change how the host calls it
        closed = self._closed
        super().cleanup()
        if not closed and not self._persistent:
            for box in list_boxes(self._box.path.parent):
                if box.meta().get("task_id") == self._task_id:
                    box.delete()


provider = provider_with(Env, "deletes_by_task")
BREAKS = frozenset(
    {
        "lifecycle.delete-own-only",
    }
)
