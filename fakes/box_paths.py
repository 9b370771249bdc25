"""Directories a command of a box starts in, resolved inside the box, never on this machine.

A path a fake is asked to start a command in (Upstash's ``cwd`` and
``folder``, the Cloudflare workspace's configured cwd, DeepInfra's exec
directory) names a directory in the box's own filesystem: whatever this
machine holds at that path says nothing about the box (``/root`` exists here,
not in a box).  So:

- a path in the box's home, workspace or /tmp (at the vendor's paths, and at
  their host paths where the world is unisolated) is resolved through
  fakes.boxfs, symlinks followed as paths inside the box;
- the box's root ``/`` is a directory of every box (made 0755 by the
  isolation engine), so a command may start there without asking;
- any other path (the box's system part, or a symlink of its areas leading
  there) is answered by an isolated box itself: the fake runs ``cd`` (or
  ``mkdir -p``) inside the box and takes its exit status, so the box's
  read-only root, its read-only system directories and its own mounts decide;
- an unisolated world has no view of a box outside its areas, so it stands in
  the one an isolated box has: ``/`` and the system directories
  (``isolation.SYSTEM_DIRS``, bound read-only from this machine, hence looked
  up here at the same path); any other path is not in the box, and nothing
  outside the areas can be made (the system part is read-only).

A directory the box does not have is ``NotInBox`` (an ``OSError``), never a
silent fallback to ``/`` or to the box's home: each vendor answers it with
its own error.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from typing import TYPE_CHECKING

from fakes import boxfs
from isolation import SYSTEM_DIRS

if TYPE_CHECKING:
    from fakes.world import Box, World

_FS_ERRORS = {
    "not_found": (errno.ENOENT, "no such directory in the box"),
    "not_a_directory": (errno.ENOTDIR, "not a directory in the box"),
    "permission": (errno.EACCES, "permission denied in the box"),
    "loop": (errno.ELOOP, "too many levels of symbolic links in the box"),
    "invalid": (errno.EINVAL, "not a valid path in the box"),
}
# ``cd`` inside the box: exit 0 when a command could start in "$1".
_CD = ["/bin/sh", "-c", 'cd -- "$1"', "box-cd"]


class NotInBox(OSError):
    """``path`` is not a directory inside the box (``strerror`` says why); ``path`` is the box path."""

    def __init__(self, code: int, why: str, path: str):
        super().__init__(code, why, path)
        self.path = path


def normal(path: object) -> str:
    """An absolute box path, normalised; anything else is ``NotInBox`` (EINVAL)."""
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        raise NotInBox(errno.EINVAL, "a box directory must be an absolute path without NUL bytes", str(path))
    norm = posixpath.normpath(path)
    return "/" + norm.lstrip("/") if norm.startswith("//") else norm


def start_dir(world: World, box: Box, path: str) -> str:
    """``path`` as a command of ``box`` is started in it (the box path where the world is isolated, the
    host directory behind it where it is not), once it is known to be a directory inside the box."""
    path = normal(path)
    fs = boxfs.for_box(world, box)
    try:
        resolved = fs.realpath(path)
        mode = fs.stat(resolved).st_mode
    except boxfs.FsError as exc:
        if exc.kind != "outside":
            raise _from_fs(exc, path)
        if world.isolated:
            if path == "/" or world.probe(box, [*_CD, path]):  # every box has its root to start in
                return path
            raise NotInBox(errno.ENOENT, "no such directory in the box", path)
        if not _in_areas(fs, path) and system_dir(path):
            return path
        raise NotInBox(errno.ENOENT, "no such directory in the box", path)
    if not stat.S_ISDIR(mode):
        raise NotInBox(errno.ENOTDIR, "not a directory in the box", path)
    return path if world.isolated else _host(fs, resolved)


def make_dirs(world: World, box: Box, path: str) -> None:
    """``mkdir -p`` of ``path`` inside ``box``: in its home, workspace or /tmp through fakes.boxfs (given
    to the box's owner), elsewhere by the box itself (isolated) or not at all (unisolated: the system part
    of a box is read-only, so only a directory it already has will do)."""
    path = normal(path)
    fs = boxfs.for_box(world, box)
    try:
        fs.makedirs(path)
        return
    except boxfs.FsError as exc:
        if exc.kind != "outside":
            raise _from_fs(exc, path)
    if world.isolated:
        if world.probe(box, ["mkdir", "-p", "--", path]):
            return
        raise NotInBox(errno.EACCES, "cannot be made in the box", path)
    if not _in_areas(fs, path) and system_dir(path):
        return
    raise NotInBox(errno.EROFS, "cannot be made in the box (its system part is read-only)", path)


def system_dir(path: str) -> bool:
    """Whether the system part of an isolated box has directory ``path``: ``/``, or a directory under one
    of the system directories, which the box binds read-only from this machine at the same path (a symlink
    there must stay among them, as it would inside the box)."""
    if path == "/":
        return True
    tops = [d for d in SYSTEM_DIRS if os.path.lexists(d)]
    if not any(path == top or path.startswith(top + "/") for top in tops):
        return False
    real = os.path.realpath(path)
    inside = [os.path.realpath(top) for top in tops]
    return os.path.isdir(real) and any(real == top or real.startswith(top + "/") for top in inside)


def _host(fs: boxfs.BoxFS, path: str) -> str:
    """This machine's directory behind box path ``path`` of one of the areas (the longest match: an area's
    host path may itself lie under another area's vendor path, such as a world kept under /tmp)."""
    area = next(a for a in fs.areas if a.holds(path))
    rest = path[len(area.box_path) :].lstrip("/")
    return str(area.host / rest) if rest else str(area.host)


def _in_areas(fs: boxfs.BoxFS, path: str) -> bool:
    return any(area.holds(path) for area in fs.areas)


def _from_fs(exc: boxfs.FsError, path: str) -> NotInBox:
    code, why = _FS_ERRORS.get(exc.kind, (errno.EIO, f"{exc.kind.replace('_', ' ')} in the box"))
    return NotInBox(code, why, path)
