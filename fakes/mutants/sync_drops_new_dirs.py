"""tempdir_box, but the sync-back archive holds only files in directories that were pushed."""

import posixpath
import tarfile
from pathlib import Path

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "the sync-back archive lists only the pushed directories, so files in new subdirectories never come back"
SCOPE = "test_sync"


class PushedDirsOnly(TempdirBoxEnvironment):
    def _download(self, dest: Path) -> None:
        from tools.environments.file_sync import iter_sync_files

        base = self._box.home / ".hermes"
        pushed = {posixpath.dirname(remote) for _, remote in iter_sync_files(container_base=str(base))}
        with tarfile.open(dest, "w") as tar:
            for path in sorted(base.rglob("*")) if base.is_dir() else []:
                if path.is_file() and not path.is_symlink() and str(path.parent) in pushed:
                    tar.add(path, arcname=str(path).lstrip("/"))


provider = provider_with(PushedDirsOnly, "sync_drops_new_dirs")
# Dropping those files is also a failed sync-back nobody hears of: the failure-reported check's
# file sits in a new subdirectory, so it is lost without a warning instead of refused with one.
BREAKS = frozenset({"sync.back-new-subdir", "sync.failure-reported"})
