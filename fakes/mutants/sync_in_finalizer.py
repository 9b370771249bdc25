"""tempdir_box, but garbage collection cleans up (and syncs back) on the collector's own thread."""

from tools.environments.base import BaseEnvironment

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "__del__ runs cleanup() and its sync_back right where the collector ran, waiting for the host's sync lock"
SCOPE = "test_sync or gc"


class SyncInFinalizer(TempdirBoxEnvironment):
    def __del__(self) -> None:
        BaseEnvironment.__del__(self)


provider = provider_with(SyncInFinalizer, "sync_in_finalizer")
BREAKS = frozenset({"lifecycle.gc-finalizer-during-sync"})
