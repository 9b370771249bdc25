"""A box's tools layer: the writable directories of a root of layers over a base (``RootLayers``).

A base is read-only and shared: the host's own system directories (``host_base``), or a root file
system directory (``directory_base``, e.g. one made by mmdebstrap).  A tools layer is one box's
directory holding

- ``root/``: the box's ``/`` outside the base's directories (``/root``, ``/srv``, ``/var/log``, ...;
  a base directory at ``/`` needs none),
- ``upper/NAME`` and ``work/NAME``: each base directory's overlay upper layer and work directory,
- ``mask/NAME``: whiteouts hiding the base's entries that other users may not read.

The base is shown through an idmapped mount (host uid 0 is the box's root), so the box's root owns
the system files, can install packages and runs set-user-ID programs such as sudo.  That would also
give it the host's root-only files of a ``host`` base (``/etc/shadow``, SSH host keys, private TLS
keys): the mask hides every entry of a base directory that is not readable (files) or searchable
(directories) by other users, which is what an unprivileged box saw of them before (nothing).  The
directories where such files appear (``MASKED_AT_START``) are scanned at each start, a few
milliseconds; the large ones (``/usr``) when the tools layer is made.  Files in the tools layer
belong to the box's ids on the host (the box's root is host uid ``uid_base``).
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from isolation.driver import SYSTEM_DIRS, Layer, RootLayers

# The host's directories a ``host`` base shows (those that exist), besides the system directories:
# the package manager's state, so that apt and dpkg work in the box on the host's package lists.
HOST_STATE_DIRS = ("/var/lib/dpkg", "/var/lib/apt", "/var/cache/apt", "/var/cache/debconf")
# Base directories whose masks are made again at each start (where root-only files appear).
MASKED_AT_START = ("/etc", "/var/lib/apt", "/var/cache/debconf")
# Directories of a tools layer's root (a ``host`` base): what a Debian system has besides the base's.
ROOT_DIRS = (
    "proc",
    "dev",
    "tmp",
    "run",
    "home",
    "root",
    "srv",
    "mnt",
    "data",
    "var",
    "var/log",
    "var/tmp",
    "var/lib",
    "var/cache",
    "var/spool",
    "var/mail",
    "var/opt",
    "var/local",
)
_WHITEOUT = (stat.S_IFCHR | 0o600, os.makedev(0, 0))


@dataclass(frozen=True)
class Base:
    """What a box's root is made of: (target inside, host directory) pairs, and links at the root."""

    dirs: tuple[tuple[str, Path], ...]
    links: tuple[tuple[str, str], ...] = ()

    @property
    def whole(self) -> bool:
        """Whether the base is a whole root (a directory at ``/``), needing no root directory of its own."""
        return any(target == "/" for target, _ in self.dirs)


def host_base(system_dirs: Sequence[str] = SYSTEM_DIRS) -> Base:
    """The host's system directories and package state (those present; a symlink stays a symlink)."""
    dirs, links = [], []
    for path in (*system_dirs, *HOST_STATE_DIRS):
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path):
            dirs.append((path, Path(path)))
    return Base(tuple(dirs), tuple(links))


def directory_base(path: Path) -> Base:
    """A root file system directory (a ``/`` with ``/usr`` and ``/etc``)."""
    return Base((("/", Path(path)),))


def _name(target: str) -> str:
    return target.strip("/").replace("/", "-") or "root"


@dataclass(frozen=True)
class ToolsLayer:
    """One box's tools layer directory (see the module docstring)."""

    path: Path

    @property
    def root(self) -> Path:
        return self.path / "root"

    def upper(self, target: str) -> Path:
        return self.path / "upper" / _name(target)

    def work(self, target: str) -> Path:
        return self.path / "work" / _name(target)

    def mask(self, target: str) -> Path:
        return self.path / "mask" / _name(target)

    def exists(self) -> bool:
        return self.path.is_dir()

    def layers(self, base: Base) -> RootLayers:
        """The engine's description of a root of this tools layer over ``base``."""
        return RootLayers(
            root=None if base.whole else self.root,
            layers=tuple(
                Layer(
                    target=target,
                    lower=source,
                    upper=self.upper(target),
                    work=self.work(target),
                    mask=self.mask(target) if self.mask(target).is_dir() else None,
                )
                for target, source in base.dirs
            ),
            links=base.links,
        )

    def make(self, base: Base, uid_base: int, *, masks: Path | None = None) -> None:
        """Create the (empty) tools layer for ``base``, with its masks: copied from ``masks`` (a directory
        ``write_masks`` filled, shared by boxes over one base) where it has them, else scanned.

        Each upper directory takes its base directory's owner (as the box sees it) and mode, which the
        overlay shows for the directory itself."""
        self.path.mkdir(mode=0o700, parents=True)
        os.chown(self.path, 0, 0)
        if not base.whole:
            self.root.mkdir(mode=0o755)
            for rel in ROOT_DIRS:
                (self.root / rel).mkdir(mode=0o700 if rel == "root" else 0o755, exist_ok=True)
            for target, _ in base.dirs:
                (self.root / target.lstrip("/")).mkdir(mode=0o755, parents=True, exist_ok=True)
            os.chmod(self.root / "tmp", 0o1777)
            for folder, dirs, _ in os.walk(self.root):
                for entry in (folder, *(os.path.join(folder, d) for d in dirs)):
                    os.lchown(entry, uid_base, uid_base)
        for kind in ("upper", "work", "mask"):
            (self.path / kind).mkdir(mode=0o700)
        for target, source in base.dirs:
            st = os.stat(source)
            upper = self.upper(target)
            upper.mkdir()
            os.chown(upper, _shifted(st.st_uid, uid_base), _shifted(st.st_gid, uid_base))
            os.chmod(upper, stat.S_IMODE(st.st_mode))
            self.work(target).mkdir()
        if base.whole:
            return
        scan = []
        for target, _ in base.dirs:
            shared = None if masks is None else masks / _name(target)
            if target in MASKED_AT_START or masks is None or shared is None or not (masks / ".complete").exists():
                scan.append(target)
            elif shared.is_dir():
                copy_mask(shared, self.mask(target))
        write_masks(base, self.path / "mask", uid_base, scan)

    def refresh_masks(self, base: Base, uid_base: int) -> None:
        """Make the masks of ``MASKED_AT_START`` again from what the base holds now (the box is stopped)."""
        if not base.whole:
            write_masks(base, self.path / "mask", uid_base, MASKED_AT_START)


def write_masks(base: Base, into: Path, uid_base: int, targets: Iterable[str] | None = None) -> None:
    """``into/NAME``: the mask of each base directory in ``targets`` (all by default), made afresh.

    Each is built aside and then swapped in (no mask is half made), and removed when the base directory
    has nothing to hide.  A mask must not be changed while an overlay uses it: only a stopped box's, or a
    shared directory that boxes copy from."""
    wanted = None if targets is None else set(targets)
    into.mkdir(mode=0o700, parents=True, exist_ok=True)
    for target, source in base.dirs:
        if wanted is not None and target not in wanted:
            continue
        mask = into / _name(target)
        fresh = into / f"{_name(target)}.new-{os.getpid()}"  # each writer its own (two `new` at once)
        remove_tree(fresh)
        fresh.mkdir(mode=0o755)
        hidden = write_mask(source, fresh, uid_base)
        remove_tree(mask)
        try:
            if hidden:
                fresh.rename(mask)
        except OSError as exc:  # another writer's mask took its place first: as good as this one
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        remove_tree(fresh)
    if wanted is None:
        (into / ".complete").touch()


def copy_mask(source: Path, dest: Path) -> None:
    """A copy of mask ``source`` at ``dest``: its directories (owner and mode kept) and whiteouts."""
    dest.mkdir(mode=0o755)
    for folder, dirs, files in os.walk(source):
        rel = os.path.relpath(folder, source)
        for d in dirs:
            st = os.lstat(os.path.join(folder, d))
            made = dest / rel / d
            made.mkdir()
            os.chown(made, st.st_uid, st.st_gid)
            os.chmod(made, stat.S_IMODE(st.st_mode))
        for f in files:
            if stat.S_ISCHR(os.lstat(os.path.join(folder, f)).st_mode):
                os.mknod(dest / rel / f, *_WHITEOUT)


def _shifted(host_id: int, uid_base: int) -> int:
    """The host id that shows inside the box as the base's ``host_id`` (unmapped ids as nobody)."""
    return uid_base + (host_id if host_id < 65536 else 65534)


def write_mask(source: Path, mask: Path, uid_base: int) -> int:
    """Whiteouts in ``mask`` for each entry under ``source`` that other users may not read; how many.

    A directory that other users may not search is hidden whole (nothing below it is visited).  The
    directories leading to a whiteout are made in ``mask`` with the base's owner (as the box sees it)
    and mode, which the box sees for them until its tools layer holds a copy."""
    count = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(source, rel) if rel else source))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                continue
            is_dir = stat.S_ISDIR(mode)
            hidden = not (mode & stat.S_IXOTH and mode & stat.S_IROTH) if is_dir else not mode & stat.S_IROTH
            child = os.path.join(rel, entry.name) if rel else entry.name
            if hidden:
                _make_parents(source, mask, rel, uid_base)
                os.mknod(mask / child, *_WHITEOUT)
                count += 1
            elif is_dir:
                stack.append(child)
    return count


def _make_parents(source: Path, mask: Path, rel: str, uid_base: int) -> None:
    if not rel or (mask / rel).is_dir():
        return
    parent = os.path.dirname(rel)
    _make_parents(source, mask, parent, uid_base)
    st = os.stat(source / rel)
    (mask / rel).mkdir()
    os.chown(mask / rel, _shifted(st.st_uid, uid_base), _shifted(st.st_gid, uid_base))
    os.chmod(mask / rel, stat.S_IMODE(st.st_mode))


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything below it (nothing when missing; links are not followed)."""
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
