"""Streaming tar: writing members one at a time, reading them forward only, extracting safely.

Memory stays bounded whatever the tree's size: the writer emits each header and copies file data
in chunks (tarfile's own writer keeps every member in a list), the reader hands out one member at
a time and forgets it, and no read asks for more than ``MAX_READ`` bytes at once, so a forged
header that claims gigabytes of extended attributes is refused instead of buffered.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from archives.errors import CorruptArchive, SourceError
from archives.members import PAYLOAD, normalize

BLOCK = tarfile.BLOCKSIZE
RECORD = tarfile.RECORDSIZE
CHUNK = 1024 * 1024
MAX_READ = 64 * 1024 * 1024
_ZEROS = bytes(CHUNK)
TAR_FORMAT: Literal[2] = 2  # tarfile.PAX_FORMAT: long names, large sizes and UTF-8 names, read by every tar


class Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


class Writable(Protocol):
    def write(self, data: bytes, /) -> object: ...


def forget_members(tar: tarfile.TarFile) -> None:
    """Drop tarfile's list of the members it has seen: a stream of millions must not keep them."""
    tar.members.clear()  # type: ignore[attr-defined]


Progress = Callable[[str, int, "int | None"], None]
"""``progress(stage, done, total)``: bytes done of ``total`` (None when unknown) in a named stage."""


class TarStreamWriter:
    """Writes a tar to a forward-only stream: ``add`` one member at a time, then ``close``."""

    def __init__(self, out: Writable, on_data: Callable[[int], None] | None = None) -> None:
        self.out = out
        self.on_data = on_data
        self.written = 0

    def add(self, info: tarfile.TarInfo, data: Readable | None = None) -> None:
        """Write ``info`` and, for a regular file, exactly ``info.size`` bytes read from ``data``."""
        self.header(info)
        if not info.isreg():
            return
        assert data is not None
        left = info.size
        while left:
            chunk = data.read(min(CHUNK, left))
            if not chunk:
                raise SourceError(
                    f"{info.name!r} shrank while it was being archived",
                    f"{left} of its {info.size} bytes were missing",
                    "stop whatever writes to the tree (or quiesce it) and run again",
                )
            self.data(chunk)
            left -= len(chunk)
        self.end(info)

    def header(self, info: tarfile.TarInfo) -> None:
        """A member's header; a regular file's ``info.size`` bytes of ``data`` and its ``end`` follow."""
        self._write(info.tobuf(TAR_FORMAT, "utf-8", "surrogateescape"))

    def data(self, chunk: bytes) -> None:
        self._write(chunk)
        if self.on_data is not None:
            self.on_data(len(chunk))

    def end(self, info: tarfile.TarInfo) -> None:
        """Pad a regular file's data to a whole block."""
        if info.isreg() and info.size % BLOCK:
            self._write(tarfile.NUL * (BLOCK - info.size % BLOCK))

    def close(self) -> None:
        """The end-of-archive marker (two zero blocks), padded to a whole record as tar does."""
        self._write(tarfile.NUL * (2 * BLOCK))
        if self.written % RECORD:
            self._write(tarfile.NUL * (RECORD - self.written % RECORD))

    def _write(self, data: bytes) -> None:
        self.out.write(data)
        self.written += len(data)


def member_info(name: str, st: os.stat_result, *, linkname: str = "", hardlink: bool = False) -> tarfile.TarInfo:
    """A tar header for a file with ``st`` (lstat), owned by nobody in particular (uid/gid 0, no names)."""
    info = tarfile.TarInfo(name)
    info.mode = stat.S_IMODE(st.st_mode)
    info.mtime = int(st.st_mtime)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if hardlink:
        info.type, info.linkname = tarfile.LNKTYPE, linkname
    elif stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISREG(st.st_mode):
        info.type, info.size = tarfile.REGTYPE, st.st_size
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, linkname
    elif stat.S_ISFIFO(st.st_mode):
        info.type = tarfile.FIFOTYPE
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        info.type = tarfile.CHRTYPE if stat.S_ISCHR(st.st_mode) else tarfile.BLKTYPE
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return info


@dataclass
class TreeEntry:
    info: tarfile.TarInfo
    path: Path | None  # the file to read for a regular file, else None


def walk_tree(root: Path) -> Iterator[TreeEntry]:
    """The members for ``root`` as ``data/...``: parents before children, names sorted, links not followed.

    Sockets are skipped (they are endpoints of running programs, with no content to keep, as tar
    skips them); hard-linked files after the first become hard links to it.
    """
    try:
        root_st = os.lstat(root)
    except OSError as exc:
        raise SourceError(f"{root} cannot be archived", exc.strerror or str(exc), "check the path") from None
    if not stat.S_ISDIR(root_st.st_mode):
        raise SourceError(f"{root} cannot be archived", "it is not a directory", "give the directory to archive")
    inodes: dict[tuple[int, int], str] = {}
    yield TreeEntry(member_info(PAYLOAD, root_st), None)
    stack = [(root, PAYLOAD)]
    while stack:
        directory, arc = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise SourceError(f"{directory} cannot be read", why, "check its permissions") from None
        subdirs = []
        for entry in entries:
            path, name = Path(entry.path), f"{arc}/{entry.name}"
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISSOCK(st.st_mode):
                    continue
                link = os.readlink(path) if stat.S_ISLNK(st.st_mode) else ""
            except OSError as exc:
                raise SourceError(f"{path} cannot be read", exc.strerror or str(exc), "check its permissions") from None
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                if key in inodes:
                    yield TreeEntry(member_info(name, st, linkname=inodes[key], hardlink=True), None)
                    continue
                inodes[key] = name
            info = member_info(name, st, linkname=link)
            yield TreeEntry(info, path if info.isreg() else None)
            if info.isdir():
                subdirs.append((path, name))
        stack.extend(reversed(subdirs))


def tree_size(root: Path) -> int:
    """Bytes of regular-file data under ``root`` (for progress; hard links counted once)."""
    total, seen = 0, set()
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


class Undecodable(Exception):
    """The plaintext stream could not be decoded (gzip or tar); the caller says why, with gpg's help."""


class ForwardReader(io.RawIOBase):
    """A forward-only view of a decompressed stream, seekable forward, for ``tarfile.open(mode="r:")``.

    Counts what it hands out (refusing more than ``cap`` bytes in all) and refuses any single read
    above ``MAX_READ``; decoding errors of the stream below become ``Undecodable``.
    """

    def __init__(self, source: Readable, cap: int, on_cap: Callable[[], Exception]) -> None:
        super().__init__()
        self.source, self.cap, self.on_cap = source, cap, on_cap
        self.position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > MAX_READ:
            raise CorruptArchive(
                "the archive has an oversized tar header",
                f"a header asks for more than {MAX_READ} bytes at once",
                "use an archive written by tar or by these tools",
            )
        try:
            data = self.source.read(size)
        except (EOFError, OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            raise Undecodable(str(exc) or type(exc).__name__) from exc
        self.position += len(data)
        if self.position > self.cap:
            raise self.on_cap()
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset if whence == io.SEEK_SET else self.position + offset
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target < self.position:
            raise io.UnsupportedOperation("the archive stream is read forward only")
        while self.position < target:
            if not self.read(min(CHUNK, target - self.position)):
                break
        return self.position

    def drain(self) -> None:
        """Read to the end (so gzip checks its CRC and length, and gpg reaches its integrity check)."""
        while self.read(CHUNK):
            pass


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything under it, whatever modes its directories have (read-only ones too)."""
    if not os.path.lexists(path):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        os.unlink(path)
        return
    for dirpath, dirs, _files in os.walk(path):
        for name in dirs:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                try:
                    os.chmod(full, 0o700)
                except OSError:
                    pass
    os.chmod(path, 0o700)
    shutil.rmtree(path)


class Extractor:
    """Writes validated members under ``dest`` (an empty directory), failing at the first problem.

    Files are created exclusively without following links, so nothing already there is ever
    written through or replaced; directory modes and times are applied last, deepest first, so
    a read-only directory does not block its own contents.  Owners are not restored (the files
    belong to whoever extracts); set-user/group-ID bits are dropped.
    """

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self._dirs: list[tuple[Path, int, int]] = []

    def add(self, rel: str, info: tarfile.TarInfo, data: Readable | None) -> None:
        path = self.dest / rel if rel else self.dest
        mode = info.mode & 0o1777
        if info.isdir():
            if rel:
                self._parents(path)
                if not path.is_dir() or path.is_symlink():
                    os.mkdir(path, 0o700)
            self._dirs.append((path, mode, int(info.mtime)))
            return
        self._parents(path)
        if info.issym():
            os.symlink(info.linkname, path)
        elif info.islnk():
            target = self.dest / "/".join(normalize(info.linkname).split("/")[1:])
            os.link(target, path, follow_symlinks=False)
            return
        else:
            assert data is not None
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with open(fd, "wb", closefd=True) as out:
                left = info.size
                while left:
                    chunk = data.read(min(CHUNK, left))
                    if not chunk:
                        raise Undecodable(f"{info.name}: unexpected end of data")
                    if len(chunk) >= BLOCK and chunk == _ZEROS[: len(chunk)]:
                        out.seek(len(chunk), io.SEEK_CUR)  # a run of zeros stays a hole, as in a sparse original
                    else:
                        out.write(chunk)
                    left -= len(chunk)
                out.truncate(info.size)
                os.fchmod(out.fileno(), mode)
        os.utime(path, (info.mtime, info.mtime), follow_symlinks=False)

    def _parents(self, path: Path) -> None:
        parent = path.parent
        if not parent.is_dir():
            os.makedirs(parent, 0o700, exist_ok=True)

    def finish(self) -> None:
        for path, mode, mtime in sorted(self._dirs, key=lambda d: len(d[0].parts), reverse=True):
            os.chmod(path, mode)
            os.utime(path, (mtime, mtime))
