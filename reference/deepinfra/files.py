"""Hermes file sync through DeepInfra's exec and fs APIs: the FileSyncManager callbacks.

One archive each way, in as few calls as the API allows:

- bulk upload: one tar of every changed file (member names are the remote
  absolute paths without "/").  Up to ``INLINE_MAX`` it travels base64-encoded
  in the argv of the one exec that unpacks it; larger, it is written to
  /workspace/.hermes_sync through the fs API first, then unpacked and removed
  by one exec; above BULK_MAX the files go one by one instead (the service
  creates parent directories on write);
- delete: ``rm -f`` with the paths as argv;
- download for sync-back: one exec packs /workspace/.hermes and, up to
  ``INLINE_BACK_MAX``, prints the archive base64-encoded and removes it;
  larger, it stays in the transfer directory to be read through the fs API
  (in parts when it is larger than one fs call allows) and removed after.

A new sandbox's first sync makes no call of its own: while the session
bootstrap runs beside it, the first archive (when small enough) is handed to
the bootstrap's exec, which unpacks it before the bootstrap (``Carried``),
and the upload returns when that exec says whether it landed.

Every call goes to the sandbox ``current()`` returns; a call the service
refuses because of the sandbox's state goes to ``recover`` (the
environment's), and once more to the sandbox it returns.  Every remote path is
under /workspace, the only tree the fs API reaches.
"""

from __future__ import annotations

import base64
import binascii
import shlex
import threading
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from reference.common import tar_transfer
from reference.deepinfra.launcher import INLINE_MAX, inline_args
from reference.deepinfra.settings import HERMES_DIR, TRANSFER_DIR

MIB = 1024 * 1024
BULK_MAX = 80 * MIB  # headroom under the 100 MiB per fs call
PART_BYTES = 64 * MIB  # sync-back archives bigger than one fs call are read in parts
INLINE_BACK_MAX = 1 * MIB  # sync-back archives up to this come back in the packing exec's output
DELETE_BATCH = 200
# Unpack the uploaded archive and remove it in the same exec; the status is tar's.
UNPACK = 'tar -xf "$1" -C / --no-same-owner; rc=$?; rm -f -- "$1"; exit $rc'
# Unpack an archive given base64-encoded in the arguments.
UNPACK_INLINE = 'printf %s "$@" | base64 -d | tar -xf - -C / --no-same-owner'

CARRY_WAIT_S = 10.0  # the bootstrap waits this long for the first sync to offer its archive (local work)
LANDED_WAIT_S = 120.0  # the first sync waits this long for the bootstrap's exec that carries its archive

T = TypeVar("T")
Recover = Callable[[BaseException, str], Any]


class Carried:
    """The first sync's archive, carried by the session bootstrap's exec.

    Two threads meet here: file sync ``offer``s its archive and waits for the outcome; the bootstrap
    ``take``s it (waiting while sync is still gathering files), carries it, and says whether it
    ``landed``.  Either side may go on alone: a sync with nothing to upload, or an archive too big to
    carry, ``close``s (the bootstrap carries nothing); a bootstrap that took nothing in time leaves a
    later offer declined (sync uploads the usual way).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._state = "open"  # open -> offered -> taken -> landed; open/offered -> closed
        self._archive: bytes | None = None
        self._error: BaseException | None = None

    def offer(self, archive: bytes) -> bool:
        """True once the bootstrap unpacked ``archive``; False if it is not carrying one (upload it
        yourself); raises when the carrying exec failed."""
        with self._cond:
            if self._state != "open":
                return False
            self._archive, self._state = archive, "offered"
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self._state in ("landed", "closed"), LANDED_WAIT_S):
                raise TimeoutError(f"the session bootstrap carrying Hermes's files did not end in {LANDED_WAIT_S:g}s")
            if self._state == "closed":
                return False
            if self._error is not None:
                raise self._error
            return True

    def close(self) -> None:
        """No archive will be offered (or one was and the bootstrap never came for it)."""
        with self._cond:
            if self._state in ("open", "offered"):
                self._state = "closed"
                self._cond.notify_all()

    def take(self) -> bytes | None:
        """The archive to carry, once sync has offered one; None when it will not."""
        with self._cond:
            self._cond.wait_for(lambda: self._state != "open", CARRY_WAIT_S)
            if self._state != "offered":
                self._state = "closed"
                self._cond.notify_all()
                return None
            self._state = "taken"
            return self._archive

    def landed(self, error: BaseException | None) -> None:
        """The carrying exec ended: the files are in place (``error`` None) or not."""
        with self._cond:
            self._error, self._state = error, "landed"
            self._cond.notify_all()


def _pack_script(remote_tar: str) -> str:
    """Pack /workspace/.hermes into ``remote_tar``; print ``inline`` and the archive in base64 (removing
    it) when it is at most INLINE_BACK_MAX bytes, else ``file SIZE`` (kept for the fs API)."""
    tar, base = shlex.quote(remote_tar), shlex.quote(HERMES_DIR.lstrip("/"))
    return (
        f"mkdir -p {shlex.quote(TRANSFER_DIR)} || exit 1\n"
        f"trap 'rm -f {tar}' EXIT\n"
        f"if [ -d /{base} ]; then tar -cf {tar} -C / --exclude='*.sock' {base}; "
        f"else tar -cf {tar} -T /dev/null; fi || exit $?\n"
        f"n=$(stat -c %s {tar}) || exit 1\n"
        f'if [ "$n" -le {INLINE_BACK_MAX} ]; then echo inline; base64 -w0 {tar}; exit 0; fi\n'
        "trap - EXIT\n"
        'echo "file $n"'
    )


class SandboxFiles:
    """The sync callbacks for the sandbox ``current()`` returns (it may be replaced)."""

    def __init__(self, current: Callable[[], Any], recover: Recover | None = None):
        self._current = current
        self._recover = recover
        self.carry: Carried | None = None  # a new sandbox's bootstrap, ready to carry the first archive

    def _call(self, act: Callable[[Any], T]) -> T:
        """``act(sandbox)``; once more on the sandbox recovery gives when the service refused it for the
        sandbox's state (recovery re-raises anything else)."""
        import deepinfra

        sandbox = self._current()
        try:
            return act(sandbox)
        except (deepinfra.NotFoundError, deepinfra.ConflictError) as exc:
            if self._recover is None:
                raise
            return act(self._recover(exc, str(sandbox.id)))

    def _exec(self, *argv: str, timeout: int = 300) -> Any:
        result = self._call(lambda sandbox: sandbox.exec(*argv, timeout=timeout))
        if result.returncode != 0:
            detail = (result.stderr or result.stdout or "").strip()[-300:]
            raise RuntimeError(f"{argv[0]} in the sandbox exited {result.returncode}: {detail}")
        return result

    def _write(self, path: str, data: bytes) -> None:
        self._call(lambda sandbox: sandbox.fs.write(path, data))

    def _read(self, path: str) -> bytes:
        return bytes(self._call(lambda sandbox: sandbox.fs.read(path)))

    def upload(self, host_path: str, remote_path: str) -> None:
        self._write(remote_path, Path(host_path).read_bytes())

    def upload_many(self, pairs: Iterable[tuple[str, str]]) -> None:
        pairs = list(pairs)
        if not pairs:
            return
        archive = tar_transfer.pack(pairs)
        carry, self.carry = self.carry, None
        if carry is not None:
            if len(archive) <= INLINE_MAX and carry.offer(archive):
                return
            carry.close()
        if len(archive) <= INLINE_MAX:
            self._exec("bash", "-c", UNPACK_INLINE, "hermes-unpack", *inline_args(archive))
            return
        if len(archive) > BULK_MAX:
            for host, remote in pairs:
                self.upload(host, remote)
            return
        remote_tar = f"{TRANSFER_DIR}/up-{uuid.uuid4().hex}.tar"
        self._write(remote_tar, archive)
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
        head, _, body = str(self._exec("bash", "-c", _pack_script(remote_tar)).stdout or "").partition("\n")
        if head.strip() == "inline":
            try:
                data = base64.b64decode(body.strip(), validate=True)
            except binascii.Error as exc:
                raise RuntimeError(f"the sandbox's sync-back archive came back damaged: {exc}") from None
            Path(dest).write_bytes(data)
            return
        words = head.split()
        if len(words) != 2 or words[0] != "file" or not words[1].isdigit():
            raise RuntimeError(f"packing the sandbox's files for sync-back answered {head[:100]!r}")
        size = int(words[1])
        try:
            with open(dest, "wb") as out:
                if size <= PART_BYTES:
                    out.write(self._read(remote_tar))
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
            out.write(self._read(f"{remote_tar}.part.{index:04d}"))
