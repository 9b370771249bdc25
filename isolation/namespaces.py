"""The namespace driver: one init per box owning its user, mount, PID, IPC and UTS namespaces.

``start`` hands a box's hostname and directories to a setup process
(``box_init.py``: a fresh interpreter, or a fork of the driver's fork
server, itself a fresh interpreter holding only that module; never a fork
of this process, so nothing of this process's memory or environment is in
the box) that was prepared ahead (a spare), and waits until the box's init
reports ready.  A driver that keeps spares forks its setup processes (a
fork costs a fraction of an interpreter's start); one that starts a single
box (``spares=0``) starts the interpreter.
Commands are then started by the init on request (``spawn``): no mounts and
no namespace set-up per command.  Each command has a socket of its own on
which the init reports its exit, read by whoever waits for it (no thread in
between).  If this process dies, the init sees its control socket close and
exits, and the kernel ends every process of the box with it.

Id maps: run as root, root inside a box is host uid/gid ``ROOT_ID_BASE``
(a range of ``ID_RANGE`` ids that belongs to no user), so even a process that
escaped the mount view could not write a file owned by a real user; run
unprivileged, root inside is the caller.  Where a user namespace cannot be
made but this process is root, boxes still get their own mount, PID, IPC and
UTS namespaces and their commands lose the dangerous capabilities, and the
driver says so.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from isolation import box_init
from isolation.driver import SYSTEM_DIRS, Bind, BoxFile, BoxSpec, BoxUser, IsolationError, RootLayers, StdStream
from isolation.popen import BoxPopen, ExitSlot

logger = logging.getLogger("isolation")

ROOT_ID_BASE = 1_800_000_000
ID_RANGE = 65536
START_TIMEOUT_S = 30.0
REPLY_TIMEOUT_S = 30.0
_INIT_SCRIPT = str(Path(box_init.__file__).resolve())
_INIT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_TIOCGPTPEER = 0x5441  # open a pseudo-terminal's slave from its master
_NSFS_DEV = os.stat("/proc/self/ns/pid").st_dev if os.path.exists("/proc/self/ns/pid") else 0


@dataclass(frozen=True)
class Mode:
    """How boxes are made on this machine."""

    stage_as_root: bool  # resolve sources as root first (the kit runs as root)
    userns: bool
    uid: int  # host ids that root inside a box maps to
    gid: int

    @property
    def root_layers(self) -> bool:
        """A writable root of layers and commands as other users need a whole id range mapped (root),
        and overlays over idmapped layers (Linux 5.19)."""
        return self.userns and self.stage_as_root and _kernel_at_least(5, 19)

    def describe(self) -> str:
        if not self.userns:
            return (
                "own mount, PID, IPC and UTS namespaces; no user namespace, box root is host root "
                "without mount and device capabilities"
            )
        who = f"host uid {self.uid}" if self.stage_as_root else "the calling user"
        return f"own user, mount, PID, IPC and UTS namespaces; box root is {who}"


def _kernel_at_least(major: int, minor: int) -> bool:
    """Whether the running Linux is ``major.minor`` or later (its release string's first two numbers)."""
    numbers = [int(n) for n in re.findall(r"\d+", os.uname().release)[:2]]
    return len(numbers) == 2 and (numbers[0], numbers[1]) >= (major, minor)


def _candidate_modes() -> list[Mode]:
    if os.geteuid() == 0:
        return [Mode(True, True, ROOT_ID_BASE, ROOT_ID_BASE), Mode(True, False, 0, 0)]
    return [Mode(False, True, os.geteuid(), os.getegid())]


class NamespaceBox:
    """A running box: its init, the socket to it, and the commands whose exits are still due."""

    def __init__(self, spec: BoxSpec, mode: Mode, system_dirs: tuple[str, ...] = SYSTEM_DIRS):
        self.spec = spec
        self.system_dirs = system_dirs
        self.hostname = spec.hostname
        self.mode = mode
        self.init_pid = 0
        self.pidns: tuple[int, int] | None = None
        self._alive = False
        self._setup: SetupProcess | None = None
        self._channel: box_init.Channel | None = None
        self._init_pidfd = -1
        self._lock = threading.Lock()  # one request on the control socket at a time

    @property
    def alive(self) -> bool:
        """Whether the init still runs (its pidfd turns readable when it exits)."""
        if not self._alive or self._init_pidfd == -1:
            return False
        ready, _, _ = select.select([self._init_pidfd], [], [], 0)
        if ready:
            self._alive = False
        return self._alive

    # -- start ---------------------------------------------------------------------------------
    def start(self, launched: tuple[SetupProcess, socket.socket] | None = None) -> None:
        """Set the box up in a setup process already prepared (a spare), or in a new one."""
        check_files(self.spec.files, self.system_dirs)
        self._setup, ours = launched or launch_setup(prepare_message(self.mode, self.system_dirs))
        self._channel = box_init.Channel(ours)
        ours.settimeout(START_TIMEOUT_S)
        try:
            self._handshake()
        except BaseException:
            self._abandon()
            raise
        ours.settimeout(REPLY_TIMEOUT_S)
        self._alive = True

    def _handshake(self) -> None:
        assert self._channel is not None and self._setup is not None
        spec = self.spec
        self._channel.send(
            {
                "op": "box",
                "hostname": spec.hostname[:64] or "box",
                "binds": [{"source": str(b.source), "target": b.target, "writable": b.writable} for b in spec.binds],
                "files": [{"source": str(f.source), "target": f.target} for f in spec.files],
                "network": spec.network,
                "rootfs": _rootfs_message(spec.rootfs, self.mode),
            }
        )
        while True:
            try:
                message = self._channel.receive()
            except TimeoutError:
                raise IsolationError(f"box {spec.hostname}: its init did not report within {START_TIMEOUT_S:.0f} s")
            except OSError as exc:
                raise IsolationError(f"box {spec.hostname}: its setup process is unreachable: {exc}") from exc
            if message is None:
                code = self._setup.wait(5)
                raise IsolationError(f"box {spec.hostname}: its setup process exited ({code}) before the box was ready")
            op = message.get("op")
            if op == "failed":
                raise IsolationError(
                    f"box {spec.hostname}: {message.get('stage')} step failed: {message.get('message')}"
                )
            if op == "ready":
                (self._init_pidfd,) = self._channel.take_fds(1)
                self.init_pid = _pidfd_pid(self._init_pidfd)
                self.pidns = (_NSFS_DEV, int(message["pidns"]))
                return

    def _abandon(self) -> None:
        if self._setup is not None:
            with contextlib.suppress(OSError):
                os.killpg(self._setup.pid, signal.SIGKILL)  # its own session: the setup process only
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._setup.wait(5)
        if self._init_pidfd != -1:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
        if self._channel is not None:
            self._channel.sock.close()

    # -- requests -----------------------------------------------------------------------------------
    def request(self, message: dict, fds: Sequence[int] = ()) -> dict | None:
        """Send a request; with ``reply`` wait for the init's answer on the control socket."""
        with self._lock:
            if self._channel is None or not self.alive:
                raise IsolationError(f"box {self.hostname} is stopped")
            try:
                self._channel.send(message, list(fds))
                if not message.get("reply"):
                    return None
                answer = self._channel.receive()
            except TimeoutError:
                raise IsolationError(f"box {self.hostname}: no reply from its init within {REPLY_TIMEOUT_S:.0f} s")
            except OSError as exc:
                raise IsolationError(f"box {self.hostname}: its init is unreachable: {exc}") from exc
            if answer is not None:
                answer["fds"] = self._channel.take_fds(int(answer.get("nfds") or 0))
        if answer is None:
            self._alive = False
            raise IsolationError(f"box {self.hostname} is stopped")
        if answer.get("op") == "error":
            raise IsolationError(f"box {self.hostname}: {answer.get('message')}")
        return answer

    def launch(
        self, argv: list[str], env: dict[str, str], cwd: str, fds: list[int], tty: bool, user: BoxUser | None = None
    ) -> ExitSlot:
        """Have the init start a command (as ``user``, else root); its replies and exit come on a socket of
        its own."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        message: dict = {"op": "spawn", "argv": argv, "env": env, "cwd": cwd, "tty": tty, "nfds": len(fds) + 1}
        if user is not None:
            if not self.mode.root_layers:
                raise IsolationError(
                    f"box {self.hostname}: commands cannot run as uid {user.uid} here ({self.mode.describe()})"
                )
            message["user"] = {"uid": user.uid, "gid": user.gid, "groups": list(user.groups)}
        try:
            try:
                self.request(message, [*fds, theirs.fileno()])
            finally:
                theirs.close()
            channel = box_init.Channel(ours)
            ours.settimeout(REPLY_TIMEOUT_S)
            try:
                answer = channel.receive()
            except (TimeoutError, OSError) as exc:
                raise IsolationError(f"box {self.hostname}: no word from its init on a new command: {exc}")
            if answer is None or answer.get("op") != "spawned":
                why = answer.get("message") if answer else "the box was stopped"
                raise IsolationError(f"box {self.hostname}: the command was not started: {why}")
            (pidfd,) = channel.take_fds(1)
            slot = ExitSlot(ours, int(answer["pid"]), _pidfd_pid(pidfd), pidfd)
            ours.settimeout(None)
            with contextlib.suppress(OSError):
                ours.send(b"k", socket.MSG_NOSIGNAL)  # its host pid is known: the init may reap it now
            return slot
        except BaseException:
            ours.close()
            raise

    # -- stop ---------------------------------------------------------------------------------
    def kill(self, timeout: float) -> None:
        """SIGKILL the init and wait until it has exited, which the kernel allows only once every other
        process of its PID namespace has; then for the setup process (and the namespace process between
        them), which exit right after it: once this returns, no process of the box is left, so a process
        that exits after it (Box Lite's daemon) leaves none behind.  Within ``timeout`` in all; a setup
        process still there then is reaped in the background."""
        deadline = time.monotonic() + timeout
        if self._init_pidfd != -1:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            ready, _, _ = select.select([self._init_pidfd], [], [], timeout)
            if not ready:
                logger.warning("box %s: its init outlived SIGKILL by %.0f s", self.hostname, timeout)
        if self._setup is not None:
            try:
                self._setup.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _reap_later(self._setup)
        self._alive = False
        if self._init_pidfd != -1:
            os.close(self._init_pidfd)
            self._init_pidfd = -1
        if self._channel is not None:
            self._channel.sock.close()


_OVERLAY_UNSAFE = (",", ":", "\\")  # separators of overlayfs's mount options


def _rootfs_message(rootfs: RootLayers | None, mode: Mode) -> dict | None:
    """The box's writable root as the setup process reads it (None: the read-only system directories)."""
    if rootfs is None:
        return None
    if not mode.root_layers:
        raise IsolationError(f"a writable root of layers needs root and a user namespace ({mode.describe()})")
    for layer in rootfs.layers:
        if not layer.target.startswith("/") or os.path.normpath(layer.target) != layer.target:
            raise IsolationError(f"layer {layer.target!r}: the target must be a normalised absolute path")
        for path in (layer.lower, layer.upper, layer.work):
            if not os.path.isdir(path):
                raise IsolationError(f"layer {layer.target}: {path} is not a directory")
    if rootfs.root is None and not any(layer.target == "/" for layer in rootfs.layers):
        raise IsolationError("a writable root needs a root directory or a layer at /")
    return {
        "root": None if rootfs.root is None else str(rootfs.root),
        "layers": [
            {
                "target": layer.target,
                "lower": str(layer.lower),
                "upper": str(layer.upper),
                "work": str(layer.work),
                "mask": None if layer.mask is None else str(layer.mask),
            }
            for layer in sorted(rootfs.layers, key=lambda layer: layer.target.rstrip("/").count("/"))
        ],
        "links": [{"target": t, "link": link} for t, link in rootfs.links],
    }


def check_files(files: Sequence[BoxFile], system_dirs: Sequence[str]) -> None:
    """Each added file names an existing host file and an absolute target in a system directory."""
    shown = [d for d in system_dirs if os.path.isdir(d) and not os.path.islink(d)]
    for f in files:
        folder, name = os.path.split(f.target)
        if not f.target.startswith("/") or os.path.normpath(f.target) != f.target or not name:
            raise IsolationError(f"file {f.target!r}: the target must be a normalised absolute path")
        if not any(folder == d or folder.startswith(d + "/") for d in shown):
            raise IsolationError(
                f"file {f.target}: its directory must be a system directory of the box ({', '.join(shown)}) "
                "or below one; bind a writable directory for anything else"
            )
        if any(c in f.target for c in _OVERLAY_UNSAFE):
            raise IsolationError(f"file {f.target}: ',', ':' and '\\' cannot appear in an added file's path")
        if not os.path.isfile(f.source):
            raise IsolationError(f"file {f.target}: its source {f.source} is not a file on this machine")


def prepare_message(mode: Mode, system_dirs: Sequence[str]) -> dict:
    """What a setup process needs before it knows its box: the id maps and the system directories."""
    count = ID_RANGE if mode.stage_as_root else 1
    return {
        "op": "prepare",
        "stage_as_root": mode.stage_as_root,
        "userns": mode.userns,
        "setgroups": mode.stage_as_root,
        "uid_map": f"0 {mode.uid} {count}\n",
        "gid_map": f"0 {mode.gid} {count}\n",
        "system": system_entries(system_dirs),
    }


def system_entries(system_dirs: Sequence[str]) -> list[dict[str, str]]:
    """The system directories present on this machine: bound read-only, or symlinked as here."""
    entries = []
    for path in system_dirs:
        if os.path.islink(path):
            entries.append({"target": path, "link": os.readlink(path)})
        elif os.path.isdir(path):
            entries.append({"target": path, "source": path})
    return entries


def _interpreter(*args: str, pass_fd: int) -> subprocess.Popen[bytes]:
    """box_init.py in a fresh interpreter of its own session: no site, no environment but the box's basics."""
    return subprocess.Popen(
        [sys.executable, "-I", "-S", _INIT_SCRIPT, *args],
        pass_fds=[pass_fd],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_INIT_ENV,
        start_new_session=True,
    )


def launch_setup(
    prepare: dict, forks: ForkServer | None = None, *, fork_self: bool = False
) -> tuple[SetupProcess, socket.socket]:
    """A new setup process (box_init.py), prepared: it waits for its box's hostname and directories.

    Forked by ``forks`` when given (a fork server costs a fraction of an interpreter's start), or, with
    ``fork_self``, forked from this very process (see ``NamespaceDriver``); in a new interpreter
    otherwise or when the fork server fails.
    """
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        setup: SetupProcess | None = _fork_self(theirs.fileno()) if fork_self else None
        if forks is not None and setup is None:
            try:
                setup = forks.fork(theirs.fileno())
            except (OSError, IsolationError) as exc:
                logger.warning("isolation: the fork server failed (%s); starting a setup interpreter instead", exc)
        if setup is None:
            setup = _interpreter(str(theirs.fileno()), pass_fd=theirs.fileno())
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    try:
        box_init.Channel(ours).send(prepare)
    except OSError:
        pass  # it died already: the box's start reports why
    return setup, ours


def _fork_self(setup_fd: int) -> ForkedSetup:
    """A setup process forked from this process: a session of its own, /dev/null as 0-2, no descriptor
    of this process but ``setup_fd``, default signal dispositions; then box_init's setup."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for signum in range(1, signal.NSIG):
                with contextlib.suppress(OSError, ValueError, RuntimeError):
                    if signum not in (signal.SIGKILL, signal.SIGSTOP):
                        signal.signal(signum, signal.SIG_DFL)
            devnull = os.open(os.devnull, os.O_RDWR)
            for target in (0, 1, 2):
                os.dup2(devnull, target)
            os.closerange(3, setup_fd)
            os.closerange(setup_fd + 1, 1 << 16)
            os.environ.clear()
            os.environ.update(_INIT_ENV)  # what a setup interpreter is started with
            os.setsid()
            code = box_init.setup_main(setup_fd)
        finally:
            os._exit(code)
    return ForkedSetup(pid, os.pidfd_open(pid), child=True)


class SetupProcess(Protocol):
    """What a box keeps of its setup process: a subprocess.Popen, or a ForkedSetup."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


class ForkedSetup:
    """A forked setup process, watched through a pidfd.

    Made by the fork server, it is not this process's child: its exit status stays with the server,
    which reaps it, and ``poll`` and ``wait`` give -1 once it has ended.  Forked by this process
    (``child``), it is reaped here and they give its exit status.
    """

    def __init__(self, pid: int, pidfd: int, *, child: bool = False) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._child = child
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = -1
            if self._child:
                with contextlib.suppress(ChildProcessError):
                    info = os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG)
                    if info is not None:
                        self.returncode = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            select.select([self._pidfd], [], [], timeout)
            if self.poll() is None:
                raise subprocess.TimeoutExpired(f"setup process {self.pid}", timeout or 0)
        return -1

    def __del__(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)


class ForkServer:
    """box_init.py's fork server (``--forks``) for one driver: started on first use, again if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._server: subprocess.Popen[bytes] | None = None
        self._channel: box_init.Channel | None = None

    def fork(self, setup_fd: int) -> ForkedSetup:
        """A new setup process whose control socket is ``setup_fd`` (sent, not given away)."""
        with self._lock:
            channel = self._running()
            try:
                channel.send({"op": "fork", "nfds": 1}, [setup_fd])
                answer = channel.receive()
            except (OSError, ValueError) as exc:
                self._stop()
                raise IsolationError(f"the fork server is unreachable: {exc}") from exc
            if answer is None or answer.get("op") != "forked":
                self._stop()
                why = answer.get("message") if answer else "it exited"
                raise IsolationError(f"the fork server did not fork: {why}")
            (pidfd,) = channel.take_fds(1)
            return ForkedSetup(int(answer["pid"]), pidfd)

    def _running(self) -> box_init.Channel:
        if self._server is not None and self._channel is not None and self._server.poll() is None:
            return self._channel
        self._stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._server = _interpreter("--forks", str(theirs.fileno()), pass_fd=theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.settimeout(START_TIMEOUT_S)
        self._channel = box_init.Channel(ours)
        return self._channel

    def _stop(self) -> None:
        server, channel, self._server, self._channel = self._server, self._channel, None, None
        if channel is not None:
            channel.sock.close()  # end of stream: the server exits
        if server is not None:
            try:
                server.wait(5)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()

    def close(self) -> None:
        with self._lock:
            self._stop()


_exited: list[SetupProcess] = []
_exited_lock = threading.Lock()


def _reap_later(setup: SetupProcess) -> None:
    """Reap setup processes whose init is gone without waiting for them (they exit right after it)."""
    with _exited_lock:
        _exited.append(setup)
        _exited[:] = [p for p in _exited if p.poll() is None]


def _pidfd_pid(pidfd: int) -> int:
    """The pid (as this process sees it) of the process behind a pidfd."""
    with open(f"/proc/self/fdinfo/{pidfd}") as fh:
        for line in fh:
            if line.startswith("Pid:"):
                pid = int(line.split()[1])
                if pid > 0:
                    return pid
    raise IsolationError("a box process is not visible from this process's PID namespace")


class NamespaceDriver:
    """Boxes in Linux namespaces (see the module docstring)."""

    name = "namespaces"

    def __init__(
        self,
        *,
        spares: int = 1,
        system_dirs: tuple[str, ...] = SYSTEM_DIRS,
        probe: bool = True,
        fork_self: bool = False,
    ) -> None:
        """``probe=False`` (for a process that starts one box and must start fast): no throwaway box
        first; the first start tries the most isolated mode this machine may offer and probes only if
        that fails.  Before that start, ``box_uid``/``box_gid`` are that mode's ids.

        ``fork_self`` (for a process of the box's own, such as Box Lite's daemon, whose memory and
        environment hold nothing the box may not see): each setup process is a fork of this process,
        not a new interpreter, which saves the interpreter's start; only the setup socket and /dev/null
        go with it, and the box's init is not dumpable, so no box process can read what it inherited.
        """
        self._fork_self = fork_self
        self.system_dirs = system_dirs
        self._probe_first = probe
        self._mode: Mode | None = None
        self._reason = ""
        self._probed = False
        self._lock = threading.Lock()
        # Setup processes started ahead, so a box's start does not wait for an interpreter to load.
        self._spares: list[tuple[SetupProcess, socket.socket]] = []
        self._spare_count = spares
        # A driver that keeps spares expects many boxes: their setup processes are forked by a server.
        self._forks = ForkServer() if spares > 0 else None
        self._refilling = False

    # -- availability -------------------------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        with self._lock:
            if not self._probed:
                self._mode, self._reason = _probe()
                self._probed = True
        return self._mode is not None, self._reason

    @property
    def mode(self) -> Mode:
        _, why = self.available()
        if self._mode is None:
            raise IsolationError(f"namespaces are not usable here: {why}")
        return self._mode

    @property
    def box_uid(self) -> int:
        return self._assumed_mode().uid

    @property
    def box_gid(self) -> int:
        return self._assumed_mode().gid

    @property
    def root_layers(self) -> bool:
        return self._assumed_mode().root_layers

    def _assumed_mode(self) -> Mode:
        if not self._probe_first and not self._probed and sys.platform.startswith("linux"):
            return _candidate_modes()[0]
        return self.mode

    # -- boxes --------------------------------------------------------------------------------
    def start(self, spec: BoxSpec) -> NamespaceBox:
        if not self._probe_first and not self._probed and sys.platform.startswith("linux"):
            mode = _candidate_modes()[0]
            box = NamespaceBox(spec, mode, self.system_dirs)
            try:
                box.start(self._launch(mode))
            except IsolationError as exc:
                logger.info("isolation: %s; probing the other modes", exc)
            else:
                with self._lock:
                    if not self._probed:
                        self._mode, self._reason, self._probed = mode, mode.describe(), True
                if self._mode == mode:
                    return box
                box.kill(10)  # another thread's probe chose differently: follow it
        spare = self._take_spare()
        box = NamespaceBox(spec, self.mode, self.system_dirs)
        try:
            box.start(spare or self._launch(self.mode))
        except IsolationError:
            if spare is None:
                raise
            box = NamespaceBox(spec, self.mode, self.system_dirs)  # a spare may have died: once more, new
            box.start()
        return box

    def _launch(self, mode: Mode) -> tuple[SetupProcess, socket.socket]:
        return launch_setup(prepare_message(mode, self.system_dirs), self._forks, fork_self=self._fork_self)

    def warm(self) -> None:
        """Have a spare ready for the next box (in the background)."""
        self._refill_soon()

    def _refill_soon(self) -> None:
        with self._lock:
            refill = self._spare_count > len(self._spares) and not self._refilling and self._mode is not None
            self._refilling = self._refilling or refill
        if refill:
            threading.Thread(target=self._refill, name="isolation-spare", daemon=True).start()

    def _take_spare(self) -> tuple[SetupProcess, socket.socket] | None:
        with self._lock:
            taken = None
            while self._spares and taken is None:
                setup, sock = self._spares.pop()
                if setup.poll() is None:
                    taken = (setup, sock)
                else:
                    sock.close()
        self._refill_soon()
        return taken

    def _refill(self) -> None:
        try:
            while True:
                with self._lock:
                    if len(self._spares) >= self._spare_count:
                        return
                spare = self._launch(self.mode)
                with self._lock:
                    self._spares.append(spare)
        except OSError as exc:
            logger.warning("isolation: could not start a spare box setup: %s", exc)
        finally:
            with self._lock:
                self._refilling = False

    def close(self) -> None:
        """End the spare setup processes and the fork server (they also end by themselves when this
        process exits)."""
        with self._lock:
            spares, self._spares = self._spares, []
            self._spare_count = 0
        for setup, sock in spares:
            sock.close()  # end of stream: the setup process exits
            with contextlib.suppress(subprocess.TimeoutExpired):
                setup.wait(5)
        if self._forks is not None:
            self._forks.close()

    def spawn(
        self,
        box: NamespaceBox,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: str,
        stdin: StdStream = None,
        stdout: StdStream = None,
        stderr: StdStream = None,
        tty: bool = False,
        user: BoxUser | None = None,
    ) -> BoxPopen:
        def launch(argv: list[str], env: dict[str, str], cwd: str, fds: list[int], tty: bool) -> ExitSlot:
            return box.launch(argv, env, cwd, fds, tty, user)

        return BoxPopen(
            list(argv),
            launch=launch,
            tty=tty,
            env=dict(env),
            cwd=cwd,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            bufsize=0,
        )

    def command_prefix(self, box: NamespaceBox, cwd: str) -> list[str]:
        """nsenter into the box's namespaces (an interactive shell, a tool that wants a plain argv).

        Needs to read the init's namespace links: as root, or any user where
        ptrace is unrestricted for the caller.  Such commands keep this
        process's capability bounding set and are not reported by the init;
        ``spawn`` is the confined way to run a command.
        """
        user = ["--user"] if box.mode.userns else []
        net = [] if box.spec.network else ["--net"]
        return [
            "nsenter",
            f"--target={box.init_pid}",
            *user,
            *net,
            "--mount",
            "--pid",
            "--ipc",
            "--uts",
            "--root",
            f"--wdns={cwd}",
            "--",
        ]

    def open_pty(self, box: NamespaceBox) -> tuple[int, int]:
        """A terminal of the box's own devpts (its name is valid inside); a host PTY if that fails."""
        try:
            answer = box.request({"op": "pty", "reply": True})
            assert answer is not None  # a request that wants a reply gets one or raises
            (master,) = answer["fds"]
        except (OSError, ValueError):
            return _host_pty()
        try:
            slave = fcntl.ioctl(master, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            os.close(master)
            return _host_pty()
        return master, int(slave)

    def tcp_socket(self, box: NamespaceBox) -> socket.socket:
        """An unconnected TCP socket made in the box's network namespace (its own, or the host's when it
        shares it): connecting it to 127.0.0.1 reaches the box's loopback, whichever process connects."""
        answer = box.request({"op": "socket", "reply": True})
        assert answer is not None  # a request that wants a reply gets one or raises
        (fd,) = answer["fds"]
        return socket.socket(fileno=fd)

    def freeze(self, box: NamespaceBox) -> None:
        box.request({"op": "signal_all", "signal": int(signal.SIGSTOP), "reply": True})

    def thaw(self, box: NamespaceBox) -> None:
        box.request({"op": "signal_all", "signal": int(signal.SIGCONT), "reply": True})

    def stop(self, box: NamespaceBox, timeout: float = 10.0) -> list[int]:
        box.kill(timeout)
        return self.processes(box)

    def processes(self, box: NamespaceBox) -> list[int]:
        """Host pids of the box's live processes (an exited init waiting to be reaped is not one)."""
        if box.pidns is None:
            return []
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                st = os.stat(f"/proc/{entry}/ns/pid")
                if (st.st_dev, st.st_ino) != box.pidns:
                    continue
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if state not in (b"Z", b"X"):
                found.append(int(entry))
        if box.alive and box.init_pid not in found:
            found.append(box.init_pid)  # unprivileged, the init's namespace links are not readable from here
        return found


def _host_pty() -> tuple[int, int]:
    import pty

    return pty.openpty()


def _probe() -> tuple[Mode | None, str]:
    """Start a throwaway box in each candidate mode and run ``true`` in it; the first that works wins."""
    if not sys.platform.startswith("linux"):
        return None, f"namespaces are Linux-only (this is {sys.platform})"
    if shutil.which("true", path=_INIT_ENV["PATH"]) is None:
        return None, "no `true` on the system path"
    reasons = []
    root = Path(tempfile.mkdtemp(prefix="kit-isolation-probe-"))
    try:
        for mode in _candidate_modes():
            work = root / ("root" if mode.stage_as_root else "user") / ("userns" if mode.userns else "plain")
            (work / "home").mkdir(parents=True)
            os.chown(work / "home", mode.uid, mode.gid)
            spec = BoxSpec("probe", (Bind(work / "home", "/home/probe"),))
            box = NamespaceBox(spec, mode)
            try:
                box.start()
                proc = BoxPopen(["true"], launch=box.launch, env=dict(_INIT_ENV), cwd="/home/probe")
                code = proc.wait(REPLY_TIMEOUT_S)
                if code == 0:
                    return mode, mode.describe()
                reasons.append(f"{mode.describe()}: `true` exited {code}")
            except (IsolationError, OSError, subprocess.SubprocessError) as exc:
                reasons.append(
                    str(exc) if not isinstance(exc, OSError) or exc.errno != errno.EPERM else f"not permitted: {exc}"
                )
            finally:
                box.kill(10)
        return None, "; ".join(reasons)
    finally:
        shutil.rmtree(root, ignore_errors=True)
