"""File operations of the fakes inside a box, safe against a hostile box.

A box's commands own its directories and may change them at any moment, for
example swap a directory for a symlink to a host directory while the fake
writes into it.  So a path is never checked and then opened by name: every
operation walks the path one component at a time from a directory file
descriptor of one of the box's areas (its home, workspace, /tmp), opening
each directory with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's
descriptor and acting on the last component relative to its parent
(``openat``, ``mkdirat``, ``unlinkat``, ``renameat``, ``fstatat``, scandir of a
descriptor).  The kernel never follows a symlink on the way; a symlink the
walk meets is read and resolved here, as a path inside the box (an absolute
target is a box path, a relative one is relative to the link's directory), so
a link out of the box's areas is refused as ``outside`` however it races.

Writes go to a temporary file in the target's directory, streamed in chunks,
and are renamed over the target when complete (an existing file is replaced,
never written through, so a hard link into the box cannot carry a write out).
Every file and directory created here is given to the box's owner
(``World.box_uid``/``box_gid``: the host ids the box's root maps to), so the
box's own user can change what the fake wrote; ``copy_tree`` copies a tree
the same way for snapshots and restores.

Errors are ``FsError`` with a ``kind`` (``KINDS``) that each vendor maps to its
own 4xx; nothing here knows HTTP.  The calls block: run them in a thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import secrets
import shutil
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

KINDS = (
    "outside",
    "not_found",
    "not_a_directory",
    "is_a_directory",
    "not_a_file",
    "exists",
    "not_empty",
    "loop",
    "invalid",
    "permission",
    "io",
)
MAX_HOPS = 40  # symlinks followed in one resolution, as the kernel's limit
MAX_PATH = 4096
MAX_RETRIES = 1000  # a component that keeps changing under the walk
CHUNK = 256 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ERRNO_KINDS = {
    errno.ENOENT: "not_found",
    errno.ENOTDIR: "not_a_directory",
    errno.EISDIR: "is_a_directory",
    errno.EEXIST: "exists",
    errno.ENOTEMPTY: "not_empty",
    errno.ELOOP: "loop",
    errno.EACCES: "permission",
    errno.EPERM: "permission",
    errno.EINVAL: "invalid",
    errno.ENAMETOOLONG: "invalid",
    errno.EXDEV: "invalid",
    errno.EBUSY: "permission",
    errno.EROFS: "permission",
    errno.ENXIO: "not_a_file",
}


class FsError(Exception):
    """A file operation that cannot be done; ``kind`` is one of ``KINDS``, ``path`` the box path."""

    def __init__(self, kind: str, path: str, detail: str = ""):
        super().__init__(f"{kind.replace('_', ' ')}: {path}" + (f" ({detail})" if detail else ""))
        self.kind, self.path, self.detail = kind, path, detail


def _from_os(exc: OSError, path: str) -> FsError:
    return FsError(_ERRNO_KINDS.get(exc.errno or 0, "io"), path, exc.strerror or "")


@dataclass(frozen=True)
class Area:
    """A directory of the box as its commands see it (``box_path``) and where it is on this machine."""

    box_path: str
    host: Path

    def holds(self, path: str) -> bool:
        return path == self.box_path or path.startswith(self.box_path.rstrip("/") + "/")


@dataclass(frozen=True)
class Entry:
    name: str
    path: str  # the box path
    stat: os.stat_result

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.stat.st_mode)


class _Place:
    """A resolved path: an open descriptor of its directory and the last component's name (None: the area root)."""

    def __init__(self, dir_fd: int, name: str | None, path: str):
        self.dir_fd, self.name, self.path = dir_fd, name, path

    def close(self) -> None:
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1

    def __enter__(self) -> _Place:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_link(name: str, dir_fd: int) -> bool:
    return _kind(name, dir_fd) == "link"


def _kind(name: str, dir_fd: int) -> str | None:
    """What ``name`` is now: "link", "dir", "other", or None if it is gone."""
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return None
    return "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "other"


class BoxFS:
    """Files of one box through its ``areas``; what it creates belongs to ``uid``:``gid``."""

    def __init__(self, areas: Sequence[Area], uid: int | None = None, gid: int | None = None):
        self.areas = sorted(areas, key=lambda a: len(a.box_path), reverse=True)  # the longest prefix wins
        self.uid = os.geteuid() if uid is None else uid
        self.gid = os.getegid() if gid is None else gid

    # -- resolution ------------------------------------------------------------------
    def _split(self, path: str) -> tuple[Area, list[str]]:
        if not isinstance(path, str) or not path.startswith("/"):
            raise FsError("invalid", str(path), "the path must be absolute")
        if "\0" in path:
            raise FsError("invalid", path.replace("\0", "\\0"), "the path contains a NUL byte")
        if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH:
            raise FsError("invalid", path[:80] + "...", f"the path is longer than {MAX_PATH} bytes")
        norm = posixpath.normpath(path)
        if norm.startswith("//"):
            norm = "/" + norm.lstrip("/")
        for area in self.areas:
            if area.holds(norm):
                return area, [p for p in norm[len(area.box_path) :].split("/") if p]
        raise FsError("outside", path)

    def _open_area(self, area: Area, path: str) -> int:
        try:
            return os.open(area.host, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FsError("outside", path, "the box's directory is a symlink")
            raise _from_os(exc, path)

    def _resolve(self, path: str, *, follow: bool, parents: bool = False) -> _Place:
        """Walk to ``path``'s directory without the kernel following any symlink; a symlink met on the way
        (or at the end, with ``follow``) is resolved inside the box and the walk starts again from its target.
        ``parents`` creates missing directories on the way."""
        hops = retries = 0
        original = path
        while True:
            area, parts = self._split(path)
            fd = self._open_area(area, original)
            restart: str | None = None
            try:
                i = 0
                while i < len(parts) - 1:
                    name = parts[i]
                    try:
                        child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                    except OSError as exc:
                        here = posixpath.join(area.box_path, *parts[: i + 1])
                        odd = exc.errno in (errno.ELOOP, errno.ENOTDIR)  # a link, or not a directory
                        kind = _kind(name, fd) if odd else None
                        if kind == "link":
                            restart = self._follow(fd, name, area, parts[:i], parts[i + 1 :], original)
                            break
                        if kind == "other":
                            raise FsError("not_a_directory", here)
                        if not odd and not (exc.errno == errno.ENOENT and parents):
                            raise _from_os(exc, here)
                        # Missing (and wanted), or it changed between the open and the look: again.
                        retries += 1
                        if retries > MAX_RETRIES:
                            raise FsError("invalid", original, "it keeps changing while it is walked")
                        if exc.errno == errno.ENOENT:
                            self._mkdir_owned(fd, name, here, exist_ok=True)
                        continue
                    os.close(fd)
                    fd = child
                    i += 1
                else:
                    if not parts:
                        return _Place(fd, None, path)
                    leaf = parts[-1]
                    if follow and _is_link(leaf, fd):
                        restart = self._follow(fd, leaf, area, parts[:-1], [], original)
                    else:
                        return _Place(fd, leaf, path)
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
            hops += 1
            if hops > MAX_HOPS:
                raise FsError("loop", original, f"more than {MAX_HOPS} symbolic links")
            assert restart is not None
            path = restart

    def _follow(self, dir_fd: int, name: str, area: Area, before: list[str], after: list[str], original: str) -> str:
        """The box path a symlink named ``name`` (in ``area``/``before``) leads to, then ``after``."""
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # no longer a link: walk the same path again
                return posixpath.join(area.box_path, *before, name, *after)
            raise _from_os(exc, original)
        base = target if target.startswith("/") else posixpath.join(area.box_path, *before, target)
        return posixpath.normpath(posixpath.join(base, *after))

    # -- ownership -------------------------------------------------------------------
    def _own(self, fd: int) -> None:
        st = os.fstat(fd)
        if (st.st_uid, st.st_gid) != (self.uid, self.gid):
            os.fchown(fd, self.uid, self.gid)

    def _own_name(self, name: str, dir_fd: int) -> None:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (st.st_uid, st.st_gid) != (self.uid, self.gid):
            os.chown(name, self.uid, self.gid, dir_fd=dir_fd, follow_symlinks=False)

    def _mkdir_owned(self, dir_fd: int, name: str, path: str, *, exist_ok: bool, mode: int = 0o755) -> None:
        try:
            os.mkdir(name, mode, dir_fd=dir_fd)
        except FileExistsError:
            if exist_ok:
                return
            raise FsError("exists", path)
        except OSError as exc:
            raise _from_os(exc, path)
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError:
            return  # replaced already; the box owns whatever is there now
        try:
            self._own(child)
        finally:
            os.close(child)

    def check(self, path: str) -> None:
        """Refuse a path that is not absolute, holds a NUL, or is not in one of the areas (no disk access)."""
        self._split(path)

    # -- reading ---------------------------------------------------------------------
    def open_read(self, path: str) -> tuple[BinaryIO, int]:
        """A regular file opened for reading (symlinks followed inside the box) and its size; close it."""
        with self._resolve(path, follow=True) as place:
            if place.name is None:
                raise FsError("is_a_directory", path)
            try:
                fd = os.open(
                    place.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=place.dir_fd
                )
            except OSError as exc:
                if exc.errno == errno.ELOOP:  # became a link after the walk: refuse rather than chase it
                    raise FsError("not_a_file", path, "it changed while it was opened")
                raise _from_os(exc, path)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise FsError("is_a_directory" if stat.S_ISDIR(st.st_mode) else "not_a_file", path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb"), st.st_size

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        fh, _ = self.open_read(path)
        with fh:
            fh.seek(offset)
            return fh.read() if length is None else fh.read(length)

    def read_text(self, path: str, limit: int = 1 << 20) -> str:
        """Up to ``limit`` bytes of a regular file as text (never blocks on a FIFO, never leaves the box)."""
        return self.read(path, 0, limit).decode("utf-8", "replace")

    def stat(self, path: str, *, follow: bool = False) -> os.stat_result:
        """``lstat`` of the path (``follow``: of what its symlinks lead to inside the box)."""
        with self._resolve(path, follow=follow) as place:
            try:
                if place.name is None:
                    return os.fstat(place.dir_fd)
                return os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False)
            except OSError as exc:
                raise _from_os(exc, path)

    def realpath(self, path: str) -> str:
        """The box path ``path`` leads to with its symlinks resolved inside the box (the last component
        need not exist); a link out of the areas is ``outside``."""
        with self._resolve(path, follow=True) as place:
            return posixpath.normpath(place.path)

    def is_dir(self, path: str) -> bool:
        try:
            return stat.S_ISDIR(self.stat(path, follow=True).st_mode)
        except FsError:
            return False

    def list(self, path: str) -> list[Entry]:
        """The directory's entries, sorted by name, each lstat'ed (symlinks are not followed)."""
        with self._resolve(path, follow=True) as place:
            fd = self._open_dir(place, path)
        try:
            entries = []
            with os.scandir(fd) as it:
                for entry in it:
                    with contextlib.suppress(FileNotFoundError):  # removed meanwhile
                        entries.append(
                            Entry(entry.name, posixpath.join(path, entry.name), entry.stat(follow_symlinks=False))
                        )
            return sorted(entries, key=lambda e: e.name)
        except OSError as exc:
            raise _from_os(exc, path)
        finally:
            os.close(fd)

    def _open_dir(self, place: _Place, path: str) -> int:
        if place.name is None:
            return os.dup(place.dir_fd)
        try:
            return os.open(place.name, _DIR_FLAGS, dir_fd=place.dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FsError("not_a_directory", path, "it changed while it was opened")
            raise _from_os(exc, path)

    # -- writing ---------------------------------------------------------------------
    def writer(self, path: str, *, parents: bool = True) -> Writer:
        """A file to fill in chunks (``write``) and put in place (``commit``), or drop (``abort``)."""
        place = self._resolve(path, follow=True, parents=parents)
        try:
            if place.name is None:
                raise FsError("is_a_directory", path)
            return Writer(self, place)
        except BaseException:
            place.close()
            raise

    def write(self, path: str, data: bytes | Iterable[bytes], *, parents: bool = True) -> int:
        """Write ``data`` (bytes, or chunks) to ``path``; returns the size written."""
        with self.writer(path, parents=parents) as out:
            for chunk in [data] if isinstance(data, bytes | bytearray | memoryview) else data:
                out.write(chunk)
            out.commit()
            return out.size

    def mkdir(self, path: str, *, parents: bool = False, exist_ok: bool = False) -> None:
        with self._resolve(path, follow=False, parents=parents) as place:
            if place.name is None:
                if exist_ok:
                    return
                raise FsError("exists", path)
            self._mkdir_owned(place.dir_fd, place.name, path, exist_ok=exist_ok)
            if exist_ok and not stat.S_ISDIR(os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False).st_mode):
                raise FsError("exists", path, "not a directory")

    def makedirs(self, path: str) -> None:
        """``mkdir -p`` inside the box."""
        self.mkdir(path, parents=True, exist_ok=True)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Remove a file or symlink; a directory only with ``recursive`` (never what a link points to)."""
        with self._resolve(path, follow=False) as place:
            if place.name is None:
                raise FsError("permission", path, "an area of the box cannot be removed")
            try:
                st = os.stat(place.name, dir_fd=place.dir_fd, follow_symlinks=False)
                if not stat.S_ISDIR(st.st_mode):
                    os.unlink(place.name, dir_fd=place.dir_fd)
                elif not recursive:
                    raise FsError("is_a_directory", path)
                else:
                    shutil.rmtree(place.name, dir_fd=place.dir_fd)
            except OSError as exc:
                raise _from_os(exc, path)

    def rename(self, src: str, dst: str) -> None:
        """Rename a file, link or directory (links are moved, not followed)."""
        with self._resolve(src, follow=False) as a, self._resolve(dst, follow=False) as b:
            if a.name is None or b.name is None:
                raise FsError("permission", src if a.name is None else dst, "an area of the box cannot be moved")
            try:
                os.rename(a.name, b.name, src_dir_fd=a.dir_fd, dst_dir_fd=b.dir_fd)
            except OSError as exc:
                raise _from_os(exc, src if exc.errno == errno.ENOENT else dst)


class Writer:
    """A temporary file next to the target, given to the box's owner, renamed over the target on commit."""

    def __init__(self, fs: BoxFS, place: _Place):
        self.fs, self.place, self.size = fs, place, 0
        self.path = place.path
        assert place.name is not None
        self.name = place.name
        mode = 0o644
        try:
            existing = os.stat(self.name, dir_fd=place.dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        except OSError as exc:
            raise _from_os(exc, self.path)
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise FsError("is_a_directory", self.path)
        if existing is not None and stat.S_ISREG(existing.st_mode):
            mode = stat.S_IMODE(existing.st_mode)
        self.tmp = f".{self.name[:200]}.{secrets.token_hex(6)}.part"
        try:
            self.fd = os.open(
                self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=place.dir_fd
            )
        except OSError as exc:
            raise _from_os(exc, self.path)
        self.done = False
        try:
            fs._own(self.fd)
            if existing is not None:
                os.fchmod(self.fd, mode)
        except BaseException:
            self.abort()
            raise

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        view = memoryview(chunk)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            raise _from_os(exc, self.path)
        self.size += len(chunk)

    def commit(self) -> None:
        try:
            os.close(self.fd)
            self.fd = -1
            os.rename(self.tmp, self.name, src_dir_fd=self.place.dir_fd, dst_dir_fd=self.place.dir_fd)
        except OSError as exc:
            self.abort()
            raise _from_os(exc, self.path)
        self.done = True
        self.place.close()

    def abort(self) -> None:
        if self.done:
            return
        self.done = True
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        with contextlib.suppress(OSError):
            os.unlink(self.tmp, dir_fd=self.place.dir_fd)
        self.place.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()  # after commit() this does nothing


# -- a box's areas -------------------------------------------------------------------------
def box_owner(world: Any) -> tuple[int, int]:
    """The host uid and gid a box's root maps to (this process's own where the world says nothing)."""
    return int(getattr(world, "box_uid", os.geteuid())), int(getattr(world, "box_gid", os.getegid()))


def areas(world: Any, box: Any, parts: Sequence[str] = ("home", "workspace", "tmp")) -> list[Area]:
    """The box's ``parts`` at the vendor's paths (``World.layout``) and at their host paths, which is
    what commands see where the world has no mount namespaces."""
    named = {
        "home": (world.layout.home, box.home_dir),
        "workspace": (world.layout.workspace, box.workspace_dir),
        "tmp": ("/tmp", box.tmp_dir),
    }
    found: list[Area] = []
    for part in parts:
        inside, host = named[part]
        found += [Area(inside, Path(host)), Area(str(host), Path(host))]
    return found


def for_box(world: Any, box: Any, parts: Sequence[str] = ("home", "workspace", "tmp")) -> BoxFS:
    """The files of ``box`` reachable through ``parts``, owned by the box's owner."""
    uid, gid = box_owner(world)
    return BoxFS(areas(world, box, parts), uid, gid)


# -- whole trees (snapshots, restores, images) -----------------------------------------------
def copy_tree(src: Path, dest: Path, uid: int | None = None, gid: int | None = None) -> None:
    """Copy the tree ``src`` into ``dest`` (created if missing; existing directories are merged): regular
    files, directories and symlinks (as links, never followed), by descriptors, so a tree that changes
    meanwhile cannot lead the copy out of it; sockets, FIFOs and devices are skipped, and so is whatever
    vanishes during the copy.  Everything created belongs to ``uid``:``gid`` (default: this process)."""
    uid = os.geteuid() if uid is None else uid
    gid = os.getegid() if gid is None else gid
    dest.mkdir(parents=True, exist_ok=True)
    src_fd = os.open(src, _DIR_FLAGS)
    try:
        dest_fd = os.open(dest, _DIR_FLAGS)
        try:
            _copy_dir(src_fd, dest_fd, uid, gid)
        finally:
            os.close(dest_fd)
    finally:
        os.close(src_fd)


def _copy_dir(src_fd: int, dest_fd: int, uid: int, gid: int) -> None:
    for name, st in _entries(src_fd):
        if stat.S_ISDIR(st.st_mode):
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
            except OSError:
                continue  # gone or replaced meanwhile
            try:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, stat.S_IMODE(st.st_mode) | 0o700, dir_fd=dest_fd)
                try:
                    target = os.open(name, _DIR_FLAGS, dir_fd=dest_fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        continue  # the destination has a non-directory there: leave it
                    raise
                try:
                    _copy_dir(child, target, uid, gid)
                    os.fchmod(target, stat.S_IMODE(st.st_mode))
                    os.fchown(target, uid, gid)
                    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
                finally:
                    os.close(target)
            finally:
                os.close(child)
        elif stat.S_ISREG(st.st_mode):
            _copy_file(src_fd, dest_fd, name, uid, gid)
        elif stat.S_ISLNK(st.st_mode):
            try:
                target_text = os.readlink(name, dir_fd=src_fd)
            except OSError:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dest_fd)
            with contextlib.suppress(OSError):
                os.symlink(target_text, name, dir_fd=dest_fd)
                os.chown(name, uid, gid, dir_fd=dest_fd, follow_symlinks=False)


def _entries(dir_fd: int) -> Iterator[tuple[str, os.stat_result]]:
    with os.scandir(dir_fd) as it:
        names = [e.name for e in it]
    for name in names:
        try:
            yield name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            continue


def _copy_file(src_fd: int, dest_fd: int, name: str, uid: int, gid: int) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_fd)
    except OSError:
        return  # gone, or replaced by a link or a FIFO: a snapshot does not freeze writers
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        os.set_blocking(fd, True)
        tmp = f".{name[:200]}.{secrets.token_hex(6)}.part"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dest_fd)
        try:
            while chunk := os.read(fd, CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
            os.fchmod(out, stat.S_IMODE(st.st_mode))
            os.fchown(out, uid, gid)
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        except BaseException:
            os.close(out)
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dest_fd)
            raise
        os.close(out)
        try:
            os.rename(tmp, name, src_dir_fd=dest_fd, dst_dir_fd=dest_fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dest_fd)
            raise
    finally:
        os.close(fd)
