"""Hermes file sync through DeepInfra's fs API: the FileSyncManager callbacks.

- bulk upload: one tar of every changed file (member names are the remote
  absolute paths without "/"), written to /workspace/.hermes_sync through the
  fs API, then unpacked and removed by one exec; above BULK_MAX the files go
  one by one instead (the service creates parent directories on write);
- delete: ``rm -f`` with the paths as argv;
- download for sync-back: ``tar`` of /workspace/.hermes into the transfer
  directory, read back through the fs API (in parts when it is larger than
  one fs call allows), then removed.

There is no batch transfer in the API (``fs.upload_dir`` is roadmap only),
hence the tar-and-exec round trip.  Every remote path is under /workspace,
the only tree the fs API reaches.
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from reference.common import tar_transfer
from reference.deepinfra.settings import HERMES_DIR, TRANSFER_DIR

MIB = 1024 * 1024
BULK_MAX = 80 * MIB  # headroom under the 100 MiB per fs call
PART_BYTES = 64 * MIB  # sync-back archives bigger than one fs call are read in parts
DELETE_BATCH = 200
# Unpack the uploaded archive and remove it in the same exec; the status is tar's.
UNPACK = 'tar -xf "$1" -C / --no-same-owner; rc=$?; rm -f -- "$1"; exit $rc'


class SandboxFiles:
    """The sync callbacks for the sandbox ``current()`` returns (it may be replaced)."""

    def __init__(self, current: Callable[[], Any]):
        self._current = current

    def _exec(self, *argv: str, timeout: int = 300) -> Any:
        result = self._current().exec(*argv, timeout=timeout)
        if result.returncode != 0:
            detail = (result.stderr or result.stdout or "").strip()[-300:]
            raise RuntimeError(f"{argv[0]} in the sandbox exited {result.returncode}: {detail}")
        return result

    def upload(self, host_path: str, remote_path: str) -> None:
        self._current().fs.write(remote_path, Path(host_path).read_bytes())

    def upload_many(self, pairs: Iterable[tuple[str, str]]) -> None:
        pairs = list(pairs)
        if not pairs:
            return
        archive = tar_transfer.pack(pairs)
        if len(archive) > BULK_MAX:
            for host, remote in pairs:
                self.upload(host, remote)
            return
        remote_tar = f"{TRANSFER_DIR}/up-{uuid.uuid4().hex}.tar"
        self._current().fs.write(remote_tar, archive)
        try:
            self._exec("bash", "-c", UNPACK, "hermes-unpack", remote_tar)
        except Exception:
            try:  # the exec may not have run at all: remove the archive on its own
                self._current().exec("rm", "-f", "--", remote_tar, timeout=60)
            except Exception:
                pass  # a stray archive in the transfer directory is harmless
            raise

    def delete(self, remote_paths: list[str]) -> None:
        for i in range(0, len(remote_paths), DELETE_BATCH):
            self._exec("rm", "-f", "--", *remote_paths[i : i + DELETE_BATCH])

    def download(self, dest: Path) -> None:
        """A tar of /workspace/.hermes whose members are its absolute paths without the leading "/"."""
        remote_tar = f"{TRANSFER_DIR}/down-{uuid.uuid4().hex}.tar"
        base = HERMES_DIR.lstrip("/")
        script = (
            f"mkdir -p {shlex.quote(TRANSFER_DIR)} && "
            f"if [ -d /{shlex.quote(base)} ]; then tar -cf {shlex.quote(remote_tar)} -C / "
            f"--exclude='*.sock' {shlex.quote(base)}; else tar -cf {shlex.quote(remote_tar)} -T /dev/null; fi "
            f"&& stat -c %s {shlex.quote(remote_tar)}"
        )
        try:
            size = int(self._exec("bash", "-c", script).stdout.split()[-1])
            with open(dest, "wb") as out:
                if size <= PART_BYTES:
                    out.write(self._current().fs.read(remote_tar))
                else:
                    self._download_parts(remote_tar, size, out)
        finally:
            try:
                self._current().exec("bash", "-c", f"rm -f {shlex.quote(remote_tar)}*", timeout=60)
            except Exception:
                pass

    def _download_parts(self, remote_tar: str, size: int, out: Any) -> None:
        self._exec("split", "-b", str(PART_BYTES), "-d", "-a", "4", remote_tar, f"{remote_tar}.part.")
        for index in range((size + PART_BYTES - 1) // PART_BYTES):
            out.write(self._current().fs.read(f"{remote_tar}.part.{index:04d}"))
