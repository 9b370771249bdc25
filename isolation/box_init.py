"""The init of one isolated box: builds its namespaces once, then starts its commands on request.

Run by the host as ``python -I -S box_init.py FD`` (standard library only:
once the box's root is in place the host's Python installation may be out of
view, so everything is imported up front).  FD is a Unix stream socket to the
host, which speaks the framed JSON protocol of ``Channel``.  With
``--forks FD`` it is a fork server instead (``serve_forks``), which forks a
setup process per request, each then running as if started with its own FD.

A box is made in two steps, so that a spare can wait, ready but for the box's
own directories:

1. ``prepare`` (everything that does not depend on the box).  The *setup*
   process covers /tmp with a private tmpfs, the stage, in a mount namespace
   of its own; running as root it binds the system directories read-only
   there.  It forks the *namespace* process, which creates the user namespace
   (the setup process writes its id maps), then the mount, UTS, IPC and PID
   namespaces, and forks the *init*, PID 1 of the box.  The init mounts the
   box's root (a tmpfs) with the system directories, a fresh /proc and a
   minimal /dev, and waits.
2. ``box`` (its hostname and directories).  The directories are resolved where
   the host's paths are reachable: as root by the setup process, which binds
   them into the stage, whence mount propagation carries them into the box's
   mount namespace; unprivileged by the init itself.  The init binds them at
   their inside paths, pivots into the root, detaches the old one, sets the
   hostname and reports ready.

Files added to a system directory (optional, e.g. /etc/hermes-box.env) are
shown through a read-only overlay of that directory: made by the setup
process as root (the overlay is then bound in like the box's directories),
by the init itself unprivileged; where the kernel refuses an unprivileged
overlay (the directory holds mounts of its own, or Linux is older than 5.11)
the init assembles the directory from binds of its entries instead.  A box without network (optional) gets a
network namespace of the init's own, with the loopback interface up.

From then on the init forks commands on request (each in its own session,
with the descriptors the host sent), reports their exits, reaps every orphan
of the box, and stops or continues all of the box's processes at once.  The
setup and namespace processes only wait for the init and exit with it.

Mounts copied from the setup process's namespace into the box's user
namespace are locked: the system directories stay read-only whatever a
process in the box does.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import platform
import re
import resource
import select
import signal
import socket
import struct
import sys
import termios
import traceback

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_REC = 0x20, 0x1000, 0x4000
MS_PRIVATE, MS_SLAVE, MS_SHARED = 0x40000, 0x80000, 0x100000
MNT_DETACH = 2
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_IDMAP = 0x1, 0x100000
OPEN_TREE_CLONE, AT_EMPTY_PATH, MOVE_MOUNT_F_EMPTY_PATH = 0x1, 0x1000, 0x4
SYS_OPEN_TREE, SYS_MOVE_MOUNT = 428, 429  # the same numbers on every architecture
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NAME = 1, 4, 24, 15
SYS_MOUNT_SETATTR = 442  # the same number on every architecture
SYS_PIVOT_ROOT = {
    "x86_64": 155,
    "aarch64": 41,
    "riscv64": 41,
    "loongarch64": 41,
    "ppc64le": 203,
    "ppc64": 203,
    "s390x": 217,
    "i686": 217,
    "armv7l": 218,
}
# Capabilities box commands never get (bounding set): mounting, devices, raw I/O, kernel and
# clock settings, tracing outside the box's uid, file handles that bypass the mount view.
DROPPED_CAPS = (2, 9, 12, 16, 17, 19, 20, 21, 22, 25, 26, 27, 30, 32, 33, 34, 35, 36, 37, 38, 39, 40)
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
TIOCSPTLCK = 0x40045431  # unlock a new pseudo-terminal's slave
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
IFREQ = struct.Struct("16sH22x")  # struct ifreq: name, flags (the union padded to its 24 bytes)
HEADER = struct.Struct("!I")
MAX_FRAME = 64 << 20

libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.unshare.argtypes = [ctypes.c_int]
libc.syscall.restype = ctypes.c_long


class MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _b(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def unshare(flags: int) -> None:
    if libc.unshare(flags) != 0:
        raise _fail(f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    if libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)) != 0:
        raise _fail(f"mount {source} on {target}")


def umount(target: str, flags: int = 0) -> None:
    if libc.umount2(_b(target), flags) != 0:
        raise _fail(f"umount {target}")


def prctl(option: int, arg: int) -> int:
    return int(
        libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    )


def make_readonly(target: str) -> None:
    """Read-only for ``target`` and every mount below it."""
    attr = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    done = libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(AT_FDCWD),
        _b(target),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    if done == 0:
        return
    # Kernels before 5.12: the top mount only, keeping the flags a user namespace may not drop.
    st = os.statvfs(target)
    keep = st.f_flag & (MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def idmapped_clone(fd: int, userns_fd: int, where: str) -> None:
    """Mount a read-only copy of the directory ``fd`` at ``where``, its files' owners seen through the
    id maps of user namespace ``userns_fd`` (host uid 0 shows as that namespace's root)."""
    tree = libc.syscall(
        ctypes.c_long(SYS_OPEN_TREE),
        ctypes.c_int(fd),
        b"",
        ctypes.c_uint(OPEN_TREE_CLONE | AT_EMPTY_PATH | os.O_CLOEXEC),
    )
    if tree < 0:
        raise _fail("open_tree")
    try:
        attr = MountAttr(MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY, 0, 0, userns_fd)
        if (
            libc.syscall(
                ctypes.c_long(SYS_MOUNT_SETATTR),
                ctypes.c_int(tree),
                b"",
                ctypes.c_uint(AT_EMPTY_PATH),
                ctypes.byref(attr),
                ctypes.c_size_t(ctypes.sizeof(attr)),
            )
            != 0
        ):
            raise _fail(f"idmapped mount of {where}")
        moved = libc.syscall(
            ctypes.c_long(SYS_MOVE_MOUNT),
            ctypes.c_int(tree),
            b"",
            ctypes.c_int(AT_FDCWD),
            _b(where),
            ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH),
        )
        if moved != 0:
            raise _fail(f"move_mount to {where}")
    finally:
        os.close(tree)


def pivot_root(new_root: str) -> None:
    """Make ``new_root`` the root and detach the old one, so nothing of it stays reachable."""
    number = SYS_PIVOT_ROOT.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"pivot_root: unknown system call number on {platform.machine()}")
    os.chdir(new_root)
    if libc.syscall(ctypes.c_long(number), b".", b".") != 0:
        raise _fail("pivot_root")
    umount(".", MNT_DETACH)  # the old root is stacked on the new one: take it off
    os.chdir("/")


# -- framing (shared with the host side, which imports this module) -----------------------------
class Channel:
    """Length-prefixed JSON frames over a Unix stream socket, descriptors riding on a frame."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._buf = bytearray()
        self._fds: list[int] = []

    def send(self, message: dict, fds: list[int] | tuple[int, ...] = ()) -> None:
        payload = json.dumps(message).encode()
        data = HEADER.pack(len(payload)) + payload
        if fds:
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))]
            sent = self.sock.sendmsg([data], rights, socket.MSG_NOSIGNAL)
            data = data[sent:]
        if data:
            self.sock.sendall(data, socket.MSG_NOSIGNAL)

    def pending(self) -> dict | None:
        """The next whole frame already received, if any."""
        if len(self._buf) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self._buf)
        if size > MAX_FRAME:
            raise ValueError(f"frame of {size} bytes")
        if len(self._buf) < HEADER.size + size:
            return None
        payload = bytes(self._buf[HEADER.size : HEADER.size + size])
        del self._buf[: HEADER.size + size]
        return json.loads(payload)

    def take_fds(self, count: int) -> list[int]:
        taken, self._fds = self._fds[:count], self._fds[count:]
        return taken

    def fill(self) -> bool:
        """Receive what is there (blocking for at least one byte); False at end of stream."""
        data, ancdata, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(64 * 4), socket.MSG_CMSG_CLOEXEC)
        for level, kind, blob in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                usable = len(blob) - len(blob) % 4
                self._fds.extend(struct.unpack(f"{usable // 4}i", blob[:usable]))
        if not data:
            return False
        self._buf += data
        return True

    def receive(self) -> dict | None:
        """The next frame, blocking; None at end of stream."""
        while True:
            message = self.pending()
            if message is not None:
                return message
            if not self.fill():
                return None


# -- setup ------------------------------------------------------------------------------------
STAGE = "/tmp"  # covered by a private tmpfs; host paths below it are reached through a descriptor


def _mkdirs(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


class Stage:
    """The tmpfs over /tmp in a private mount namespace, and a way to the host paths it covers."""

    def __init__(self) -> None:
        self.under = os.open(STAGE, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # the host's /tmp, before covering
        mount("kit-stage", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")

    def open(self, path: str, directory: bool = True) -> int:
        """An O_PATH descriptor of a host directory (or file), even one below the covered /tmp."""
        path = os.path.normpath(path)
        flags = os.O_PATH | os.O_CLOEXEC | (os.O_DIRECTORY if directory else 0)
        if path == STAGE or path.startswith(STAGE + "/"):
            return os.open(path[len(STAGE) :].lstrip("/") or ".", flags, dir_fd=self.under)
        return os.open(path, flags)

    def bind(self, path: str, where: str) -> None:
        fd = self.open(path)
        try:
            _mkdirs(where)
            mount(f"/proc/self/fd/{fd}", where, None, MS_BIND)
        finally:
            os.close(fd)


def _staged(prep: dict, folder: str) -> str:
    """Where the setup process staged the system directory holding ``folder`` (and the rest of its path)."""
    for entry in prep["system"]:
        top = entry["target"]
        if not entry.get("link") and (folder == top or folder.startswith(top + "/")):
            return entry["source"] + folder[len(top) :]
    raise OSError(errno.ENOENT, f"{folder} is in no system directory of the box")


def _prepare_stage(prep: dict) -> Stage:
    """Setup process, as root: a private mount namespace, the stage, the system directories read-only."""
    unshare(CLONE_NEWNS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    stage = Stage()
    mount(None, STAGE, None, MS_SHARED)  # what is bound here later reaches the box's namespace (as a slave)
    for i, entry in enumerate(prep["system"]):
        if entry.get("link"):
            continue
        where = f"{STAGE}/s{i}"
        _mkdirs(where)
        mount(entry["source"], where, None, MS_BIND | MS_REC)
        make_readonly(where)
        entry.update(source=where, locked=True)
    _mkdirs(f"{STAGE}/root")
    _mkdirs(f"{STAGE}/box")
    return stage


def _build_base(prep: dict) -> str:
    """Init, before the box is known: its root with the system directories, /proc and /dev."""
    root = f"{STAGE}/root"
    if prep.get("stage_as_root"):
        mount(None, STAGE, None, MS_SLAVE)  # receives the box's directories; pivot_root refuses a shared parent
    else:
        mount(None, "/", None, MS_REC | MS_PRIVATE)
        prep["_stage"] = Stage()  # the host's /tmp stays reachable for the box's directories
        _mkdirs(root)
    mount("box", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for entry in prep["system"]:
        target = root + entry["target"]
        if entry.get("link"):
            os.symlink(entry["link"], target)
            continue
        _mkdirs(target)
        mount(entry["source"], target, None, MS_BIND | MS_REC)
        if not entry.get("locked"):
            make_readonly(target)
    for name in ("proc", "dev", "tmp", "run", "var"):
        _mkdirs(f"{root}/{name}")
    mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    if not prep.get("userns"):  # kernel settings: with a user namespace they belong to an unmapped root
        for sub in ("sys", "sysrq-trigger"):
            path = f"{root}/proc/{sub}"
            if os.path.exists(path):
                mount(path, path, None, MS_BIND | MS_REC)
                make_readonly(path)
    _build_dev(f"{root}/dev")
    return root


def _finish_root(root: str, prep: dict, binds: list[dict], files: list[dict], layered: str | None = None) -> None:
    """Init, once the box is known: its directories at their inside paths, then pivot into the root.

    ``layered``: the writable root the setup process made (``_layered_root``), which replaces the
    read-only one of ``_build_base`` and stays writable.
    """
    stage: Stage | None = prep.get("_stage")
    if layered is not None:
        # Propagated from the setup process's namespace, the root is locked, which pivot_root refuses:
        # a recursive bind of it made here is not (the mounts below it stay locked).
        root = layered
        mount(root, root, None, MS_BIND | MS_REC)
        for name in ("proc", "dev", "tmp", "run"):
            _mkdirs(f"{root}/{name}")
        mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _build_dev(f"{root}/dev")
        mount("run", f"{root}/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    for b in sorted(binds, key=lambda b: b["target"].count("/")):
        target = root + b["target"]
        _mkdirs(target)
        if stage is not None:
            stage.bind(b["source"], target)
        else:
            mount(b["source"], target, None, MS_BIND | (MS_REC if b.get("recursive") else 0))
        if not b.get("writable", True):
            make_readonly(target)
    if stage is not None and files:  # unprivileged: the init adds the files itself
        for k, (folder, group) in enumerate(_files_by_dir(files)):
            where = root + folder
            layer = f"{STAGE}/layer{k}"
            _mkdirs(layer)
            if not _submounts(where):  # an overlay may not cover a directory holding locked mounts
                try:
                    _overlay_files(where, where, layer, [(n, stage.open(src, directory=False)) for n, src in group])
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.EPERM):  # EPERM/EINVAL: before Linux 5.11
                        raise
            _assemble_files(where, layer, [(n, stage.open(src, directory=False)) for n, src in group])
    if stage is not None:
        os.close(stage.under)  # no way back to the host's /tmp may stay open in the box
        prep.pop("_stage")
    pivot_root(root)
    if layered is None:
        mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _layered_root(stage: Stage, rootfs: dict, userns_fd: int, files: list[dict]) -> str:
    """Setup process, as root: the box's writable root in the stage, whence it reaches the init.

    The root directory (writable) is bound first, then each layer's overlay at
    its target: lower layers the mask (whiteouts, when given) over an idmapped
    read-only copy of the base directory, so that the base's files belong to the
    box's root and a copy-up or a set-user-ID program works as on a machine of
    its own; the upper layer is the box's tools layer.  Mounts below a base
    directory (a container's /etc/resolv.conf) are bound again on top,
    read-only.  Then the links, and the added files, each bound read-only over
    a file of its name.
    """
    root = f"{STAGE}/box/root"
    _mkdirs(root)
    held: list[int] = []
    try:
        if rootfs.get("root"):
            stage.bind(rootfs["root"], root)
        for k, layer in enumerate(rootfs["layers"]):
            lower = f"{STAGE}/box/lower{k}"
            _mkdirs(lower)
            source = stage.open(layer["lower"])
            held.append(source)
            idmapped_clone(source, userns_fd, lower)
            parts = []
            for key in ("mask", "upper", "work"):
                if layer.get(key):
                    fd = stage.open(layer[key])
                    held.append(fd)
                    parts.append((key, f"/proc/self/fd/{fd}"))
            paths = dict(parts)
            lowers = f"{paths['mask']}:{lower}" if "mask" in paths else lower
            target = root + layer["target"].rstrip("/")
            _mkdirs(target)
            options = f"lowerdir={lowers},upperdir={paths['upper']},workdir={paths['work']}"
            mount("tools", target, "overlay", MS_NODEV, options)
            if not layer["lower"].startswith(STAGE + "/"):
                for rel in _submounts(layer["lower"]):
                    with contextlib.suppress(OSError):
                        mount(layer["lower"] + rel, target + rel, None, MS_BIND | MS_REC)
                        make_readonly(target + rel)
        for link in rootfs.get("links") or []:
            with contextlib.suppress(FileExistsError):
                os.symlink(link["link"], root + link["target"])
        for f in files:
            target = root + f["target"]
            _mkdirs(os.path.dirname(target))
            if not os.path.isfile(target) or os.path.islink(target):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)
                with open(target, "w"):
                    pass
            fd = stage.open(f["source"], directory=False)
            held.append(fd)
            mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
            make_readonly(target)
    finally:
        for fd in held:
            with contextlib.suppress(OSError):
                os.close(fd)
    return root


def _build_dev(dev: str) -> None:
    mount("dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        if not os.path.exists(f"/dev/{name}"):
            continue
        with open(f"{dev}/{name}", "wb"):
            pass
        mount(f"/dev/{name}", f"{dev}/{name}", None, MS_BIND)
    _mkdirs(f"{dev}/pts")
    mount("devpts", f"{dev}/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
    os.symlink("pts/ptmx", f"{dev}/ptmx")
    _mkdirs(f"{dev}/shm")
    mount("shm", f"{dev}/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m")
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{dev}/{name}")


def _files_by_dir(files: list[dict]) -> list[tuple[str, list[tuple[str, str]]]]:
    """The files grouped by the directory they appear in: (directory, [(name, source)])."""
    by_dir: dict[str, list[tuple[str, str]]] = {}
    for f in files:
        folder, name = os.path.split(f["target"])
        by_dir.setdefault(folder, []).append((name, f["source"]))
    return sorted(by_dir.items())


def _unescape_mountinfo(field: str) -> str:
    """A mount point as /proc/self/mountinfo writes it, with its octal escapes (\\040) undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _submounts(folder: str) -> list[str]:
    """The outermost mounts strictly below ``folder`` (paths relative to it, each starting with /)."""
    below = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            point = _unescape_mountinfo(line.split()[4])
            if point.startswith(folder + "/"):
                below.append(point[len(folder) :])
    below.sort(key=lambda p: p.count("/"))
    outermost: list[str] = []
    for rel in below:
        if rel not in outermost and not any(rel.startswith(o + "/") for o in outermost):
            outermost.append(rel)
    return outermost


def _overlay_files(lower: str, where: str, layer: str, files: list[tuple[str, int]]) -> None:
    """Show directory ``lower`` at ``where`` read-only with ``files`` added (``where`` may be ``lower``).

    An overlay with only lower layers (so read-only): on top ``layer``, an empty
    directory on a tmpfs that gets one empty file per added name (their mount
    points), below it ``lower``.  An overlay shows only the directory's own
    filesystem, so the mounts below ``lower`` (a container's /etc/resolv.conf)
    are bound again on top, then each file (an O_PATH descriptor, closed here)
    over its point, and the whole made read-only.
    """
    try:
        for name, _ in files:
            with open(f"{layer}/{name}", "w"):
                pass
        subs = []
        try:
            for rel in _submounts(lower):
                subs.append((rel, os.open(lower + rel, os.O_PATH | os.O_CLOEXEC)))
            mount("kit-overlay", where, "overlay", MS_RDONLY | MS_NOSUID | MS_NODEV, f"lowerdir={layer}:{lower}")
            for rel, fd in subs:
                mount(f"/proc/self/fd/{fd}", where + rel, None, MS_BIND | MS_REC)
        finally:
            for _, fd in subs:
                os.close(fd)
        for name, fd in files:
            mount(f"/proc/self/fd/{fd}", f"{where}/{name}", None, MS_BIND)
        make_readonly(where)
    finally:
        for _, fd in files:
            with contextlib.suppress(OSError):
                os.close(fd)


def _assemble_files(where: str, layer: str, files: list[tuple[str, int]]) -> None:
    """Show directory ``where`` read-only with ``files`` added, where no overlay may cover it.

    Unprivileged, the kernel refuses an overlay of a directory holding mounts
    of its own (a container's /etc/hosts), and kernels before 5.11 any overlay.
    Then a tmpfs gets one mount point per entry of ``where``, each entry bound
    over its point (its own mounts with it), symbolic links copied, the files
    bound over theirs, and the whole is bound over ``where``, read-only.
    Unlike the overlay, an entry the host adds to the directory later does not
    show in a running box (changes to existing entries do).
    """
    try:
        mount("kit-files", layer, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        added = {name for name, _ in files}
        for entry in os.scandir(where):
            if entry.name in added:
                continue
            point = f"{layer}/{entry.name}"
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), point)
                continue
            if entry.is_dir(follow_symlinks=False):
                os.mkdir(point)
            else:
                with open(point, "w"):
                    pass
            mount(entry.path, point, None, MS_BIND | MS_REC)
        for name, fd in files:
            with open(f"{layer}/{name}", "w"):
                pass
            mount(f"/proc/self/fd/{fd}", f"{layer}/{name}", None, MS_BIND)
        mount(layer, where, None, MS_BIND | MS_REC)
        make_readonly(where)
    finally:
        for _, fd in files:
            with contextlib.suppress(OSError):
                os.close(fd)


def _own_network() -> None:
    """A network namespace of the init's own (its commands inherit it) with the loopback interface up."""
    unshare(CLONE_NEWNET)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = IFREQ.pack(b"lo", 0)
        flags = IFREQ.unpack(fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, IFREQ.pack(b"lo", flags | IFF_UP))


# -- the init ------------------------------------------------------------------------------------
class Command:
    """A command the init started: its socket to the host, and whether the host knows its pid."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.released = False  # the host has resolved its host pid: it may be reaped


class Init:
    """PID 1's loop: requests on the control socket, acknowledgements, and children to reap."""

    def __init__(self, channel: Channel):
        self.channel = channel
        self.commands: dict[int, Command] = {}
        self.waiting: dict[int, int] = {}  # command socket fd -> pid, until the host acknowledges
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.poller = select.poll()

    def run(self) -> None:
        # What commands inherit: default dispositions (exec keeps an ignored signal ignored), no
        # dangerous capabilities in the bounding set (an unknown one on an older kernel is skipped).
        # SIGINT too: Python's handler would let a box process interrupt its init (PID 1 of a namespace
        # receives from inside only the signals it handles), and commands should see the default.
        for signum in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        for cap in DROPPED_CAPS:
            prctl(PR_CAPBSET_DROP, cap)
        os.umask(0o022)
        with contextlib.suppress(ValueError, OSError):
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 1 << 16), hard))
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        control = self.channel.sock.fileno()
        self.poller.register(control, select.POLLIN)
        self.poller.register(self.wake_r, select.POLLIN)
        while True:
            while (message := self.channel.pending()) is not None:
                self.handle(message)
            try:
                ready = [fd for fd, _ in self.poller.poll()]
            except InterruptedError:
                continue
            for fd in ready:
                if fd == self.wake_r:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(self.wake_r, 512):
                            pass
                    self.reap()
                elif fd == control:
                    if not self.channel.fill():
                        return  # the host is gone: PID 1 exits and the kernel ends the box
                else:
                    self.acknowledged(fd)

    def acknowledged(self, fd: int) -> None:
        pid = self.waiting.pop(fd, None)
        if pid is None:
            return
        self.poller.unregister(fd)
        command = self.commands.get(pid)
        if command is None:
            return
        with contextlib.suppress(OSError):
            command.sock.recv(64)  # the ack itself, or the end of a host that gave up
        command.released = True
        self.reap()

    def reap(self) -> None:
        """Reap every ended child, except commands whose host pid the host has not resolved yet.

        The host learns a command's host pid from the pidfd sent with "spawned";
        until it acknowledges, the command's pid must stay allocated (a zombie at
        worst), or the pidfd would name no pid.
        """
        if not self.waiting:
            while True:  # nothing to hold back: any ended child will do
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    return
                if pid == 0:
                    return
                self.ended(pid, status)
        for pid in _children():
            command = self.commands.get(pid)
            if command is not None and not command.released:
                continue
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done == pid:
                self.ended(pid, status)

    def ended(self, pid: int, status: int) -> None:
        command = self.commands.pop(pid, None)
        if command is None:
            return  # an orphan the box's init adopted
        with contextlib.suppress(OSError):
            Channel(command.sock).send({"op": "exit", "code": os.waitstatus_to_exitcode(status)})
        command.sock.close()

    def handle(self, message: dict) -> None:
        op = message.get("op")
        if op == "spawn":
            fds = self.channel.take_fds(int(message.get("nfds", 0)))
            sock = socket.socket(fileno=fds.pop())
            try:
                pid = self.spawn(message, fds)
            except OSError as exc:
                with contextlib.suppress(OSError):
                    Channel(sock).send({"op": "error", "message": str(exc)})
                sock.close()
                return
            finally:
                for fd in fds:
                    os.close(fd)
            self.commands[pid] = Command(sock)
            self.waiting[sock.fileno()] = pid
            self.poller.register(sock.fileno(), select.POLLIN)
            pidfd = os.pidfd_open(pid)
            try:
                Channel(sock).send({"op": "spawned", "pid": pid}, [pidfd])
            except OSError:
                pass  # the host gave up on it: the acknowledgement step sees the end
            finally:
                os.close(pidfd)
        elif op == "pty":
            master = os.open("/dev/pts/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
            try:
                fcntl.ioctl(master, TIOCSPTLCK, struct.pack("i", 0))
                self.channel.send({"op": "done", "nfds": 1}, [master])
            finally:
                os.close(master)
        elif op == "socket":  # a TCP socket of the box's network namespace, for a host-side relay to connect
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as made:
                self.channel.send({"op": "done", "nfds": 1}, [made.fileno()])
        elif op == "signal_all":
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, int(message["signal"]))  # every process of this PID namespace but init
            self.channel.send({"op": "done"})
        else:
            self.channel.send({"op": "error", "message": f"unknown request {op!r}"})

    def spawn(self, message: dict, fds: list[int]) -> int:
        """posix_spawn (no copy of the init's memory) where it can do all; fork and exec otherwise."""
        argv = [str(a) for a in message["argv"]]
        env = {str(k): str(v) for k, v in (message.get("env") or {}).items()}
        path = None if message.get("tty") or message.get("user") or not argv else _which(argv[0], env)
        if path is not None:
            try:
                os.chdir(message.get("cwd") or "/")
            except OSError:
                os.chdir("/")
            try:
                # Every descriptor of the init is close-on-exec: the command gets exactly 0-2.
                return os.posix_spawn(
                    path,
                    argv,
                    env,
                    setsid=True,
                    file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(fds[:3])],
                )
            except OSError:
                pass  # the fork path runs into the same error and reports it as a shell would
            finally:
                os.chdir("/")
        pid = os.fork()
        if pid == 0:
            try:
                _exec_command(message, fds)
            finally:
                os._exit(127)
        return pid


def _which(name: str, env: dict[str, str]) -> str | None:
    if "/" in name:
        return name
    for folder in env.get("PATH", DEFAULT_PATH).split(":"):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _exec_command(message: dict, fds: list[int]) -> None:
    """In the forked child: a session of its own, the host's descriptors as 0-2, then exec.

    Kept short: signal dispositions and the capability bounding set were set
    once in the init, and exec resets the init's handlers.
    """
    argv = [str(a) for a in message["argv"]]
    try:
        os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        if message.get("tty"):
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        os.closerange(3, 1 << 16)
        user = message.get("user")
        if user:  # the box user's ids, which drop every capability of the box's root
            os.setgroups([int(g) for g in user.get("groups") or [user["gid"]]])
            os.setresgid(int(user["gid"]), int(user["gid"]), int(user["gid"]))
            os.setresuid(int(user["uid"]), int(user["uid"]), int(user["uid"]))
        try:
            os.chdir(message.get("cwd") or "/")
        except OSError:
            os.chdir("/")
        _execvpe(argv, dict(message.get("env") or {}))
    except OSError as exc:
        code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
        with contextlib.suppress(OSError):
            os.write(2, f"{argv[0] if argv else '?'}: {exc.strerror}\n".encode(errors="surrogateescape"))
        os._exit(code)


def _children() -> list[int]:
    """The init's children (as pids of the box)."""
    try:
        with open("/proc/1/task/1/children") as fh:
            return [int(p) for p in fh.read().split()]
    except FileNotFoundError:  # kernels without CONFIG_PROC_CHILDREN: the box's /proc is small
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as fh:
                        fields = fh.read().rsplit(b")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if fields[1:2] == [b"1"]:
                    found.append(int(entry))
        return found


def _execvpe(argv: list[str], env: dict[str, str]) -> None:
    """execve through $PATH as a shell does (os.execvpe imports modules the box cannot see)."""
    if "/" in argv[0]:
        os.execve(argv[0], argv, env)
    first_error: OSError | None = None
    last_error: OSError = FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))
    for folder in env.get("PATH", DEFAULT_PATH).split(":"):
        try:
            os.execve(os.path.join(folder or ".", argv[0]), argv, env)
        except (FileNotFoundError, NotADirectoryError) as exc:
            last_error = exc
        except OSError as exc:
            first_error = first_error or exc
    raise first_error or last_error


def _init_main(channel: Channel, prep: dict, setup: socket.socket) -> None:
    """PID 1 of the box: the base root now, the rest when the setup process passes the box on."""
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        name = ctypes.create_string_buffer(b"box-init")
        libc.prctl(ctypes.c_int(PR_SET_NAME), name, ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
        root = _build_base(prep)
        box = Channel(setup).receive()
        setup.close()
        if box is None:
            os._exit(1)  # the box was never asked for (a spare at the host's exit)
        _finish_root(root, prep, box["binds"], box.get("files") or [], box.get("root"))
        socket.sethostname(box["hostname"])
        if not box.get("network", True):
            _own_network()
        prctl(PR_SET_DUMPABLE, 0)  # box commands may not read the init's memory or descriptors
        me = os.pidfd_open(1)
        channel.send({"op": "ready", "pidns": os.stat("/proc/self/ns/pid").st_ino}, [me])
        os.close(me)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            channel.send({"op": "failed", "stage": "root", "message": _describe(exc)})
        os._exit(1)
    # A fresh reader: the setup process may have buffered its own messages (prepare, box) in the
    # channel this process was forked with, and those are not requests.
    Init(Channel(channel.sock)).run()
    os._exit(0)


def _namespaces_main(channel: Channel, prep: dict, mapped: int, setup: socket.socket) -> int:
    """The namespace process: user namespace (mapped by the setup process), then the box's others."""
    if prep.get("userns"):
        unshare(CLONE_NEWUSER)
        os.write(mapped, b"u")  # the setup process writes our maps ...
        if os.read(mapped, 1) != b"m":  # ... and says when they are there
            return 1
        if prep.get("setgroups", True):
            os.setgroups([])
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
    os.close(mapped)
    unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWPID)
    child = os.fork()
    if child == 0:
        _init_main(channel, prep, setup)
    setup.close()
    channel.sock.close()
    return _wait(child)


def _write_maps(pid: int, prep: dict) -> None:
    if not prep.get("setgroups", True):
        with open(f"/proc/{pid}/setgroups", "w") as fh:
            fh.write("deny")
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/{pid}/{name}", "w") as fh:
            fh.write(prep[name])


def _wait(child: int) -> int:
    while True:
        try:
            _, status = os.waitpid(child, 0)
            return os.waitstatus_to_exitcode(status)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 1


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    with contextlib.suppress(Exception):
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            text += f" (at line {frames[-1].lineno})"
    return text


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--forks"]:
        return serve_forks(int(argv[2]))
    return setup_main(int(argv[1]))


def setup_main(control: int) -> int:
    """The setup process of one box, on control socket ``control``: prepare, then the box."""
    os.set_inheritable(control, False)
    channel = Channel(socket.socket(fileno=control))
    prep = channel.receive()
    if prep is None or prep.get("op") != "prepare":
        return 1
    step = "prepare"
    try:
        stage = _prepare_stage(prep) if prep.get("stage_as_root") else None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # to pass the box on to the init
        mapped_here, mapped_there = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        step = "namespaces"
        child = os.fork()
        if child == 0:
            ours.close()
            mapped_here.close()
            code = 1
            try:
                code = _namespaces_main(channel, prep, mapped_there.fileno(), theirs)
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    channel.send({"op": "failed", "stage": "namespaces", "message": _describe(exc)})
            os._exit(code)
        theirs.close()
        mapped_there.close()
        if prep.get("userns"):
            step = "user namespace"
            if mapped_here.recv(1) != b"u":
                return _wait(child)
            _write_maps(child, prep)
            mapped_here.send(b"m")
        mapped_here.close()
        step = "box"
        box = channel.receive()
        if box is None or box.get("op") != "box":
            ours.close()
            return _wait(child)
        if stage is not None:  # as root: the box's directories into the stage, whence they reach the init
            binds = []
            for i, b in enumerate(box["binds"]):
                where = f"{STAGE}/box/b{i}"
                stage.bind(b["source"], where)
                binds.append({**b, "source": where})
            if box.get("rootfs"):
                step = "root layers"
                userns_fd = os.open(f"/proc/{child}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
                try:
                    box["root"] = _layered_root(stage, box["rootfs"], userns_fd, box.get("files") or [])
                finally:
                    os.close(userns_fd)
                box["files"] = []
            step = "files"
            for k, (folder, group) in enumerate(_files_by_dir(box.get("files") or [])):
                where, layer = f"{STAGE}/box/o{k}", f"{STAGE}/box/l{k}"
                _mkdirs(where)
                _mkdirs(layer)
                sources = [(name, stage.open(src, directory=False)) for name, src in group]
                _overlay_files(_staged(prep, folder), where, layer, sources)
                binds.append({"source": where, "target": folder, "writable": False, "recursive": True})
            box["binds"], box["files"] = binds, []
        channel.sock.close()  # the init reads the host's requests from now on
        Channel(ours).send(box)
        ours.close()
    except BaseException as exc:
        with contextlib.suppress(OSError):
            channel.send({"op": "failed", "stage": step, "message": _describe(exc)})
        return 1
    return _wait(child)


def serve_forks(control: int) -> int:
    """The fork server (``box_init.py --forks FD``): forks one setup process per request.

    A setup process made by a new interpreter pays for the interpreter's start,
    the imports and the compilation of this file, tens of milliseconds of CPU
    per box; a fork of this server, itself a fresh interpreter holding nothing
    but this module, costs well under one and carries the same nothing.  A
    request is ``fork`` with one descriptor, the new setup process's control
    socket; the answer is ``forked`` {pid} with a pidfd of it.  The server
    reaps its children and exits when the host closes its socket (the setup
    processes it made go on: each ends with its own socket or its box).
    """
    os.set_inheritable(control, False)
    channel = Channel(socket.socket(fileno=control))
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    poller = select.poll()
    poller.register(control, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        while (message := channel.pending()) is not None:
            fds = channel.take_fds(int(message.get("nfds", 0)))
            if message.get("op") != "fork" or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                channel.send({"op": "error", "message": f"unknown request {message.get('op')!r}"})
                continue
            pid = os.fork()
            if pid == 0:  # the setup process: nothing of the server's but this module
                code = 1
                try:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_r)
                    os.close(wake_w)
                    channel.sock.close()
                    os.setsid()
                    code = setup_main(fds[0])
                finally:
                    os._exit(code)
            os.close(fds[0])
            pidfd = os.pidfd_open(pid)
            try:
                channel.send({"op": "forked", "pid": pid}, [pidfd])
            finally:
                os.close(pidfd)
        try:
            ready = [fd for fd, _ in poller.poll()]
        except InterruptedError:
            continue
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake_r, 512):
                    pass
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
        if control in ready and not channel.fill():
            return 0


if __name__ == "__main__":
    code = main(sys.argv)
    os._exit(code)  # no interpreter teardown: the host waits for this exit when a box ends
