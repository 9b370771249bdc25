"""tempdir_box, but cleanup() silences the host's file-sync logger while it syncs back."""

import logging

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "cleanup() turns the host's file-sync logger off to keep teardown quiet, so a failed sync-back goes unseen"
SCOPE = "test_sync"


class QuietSyncBack(TempdirBoxEnvironment):
    def cleanup(self, *args, **kwargs) -> None:
        log = logging.getLogger("tools.environments.file_sync")
        was = log.disabled
        log.disabled = True
        try:
            super().cleanup(*args, **kwargs)
        finally:
            log.disabled = was


provider = provider_with(QuietSyncBack, "quiet_sync_back")
BREAKS = frozenset({"sync.failure-reported"})
