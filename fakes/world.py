"""The box world under every fake vendor service.

A box is a directory on this machine with its own HOME, workspace and tmp.
Commands are local bash (or an argv) started in their own session and
process group, so a signal reaches the whole tree, while detached
``nohup ... &`` children survive the command that started them.  Boxes move
through creating, idle/running, paused, error and deleted, with configurable
transition delays; pausing freezes a box's processes (SIGSTOP) and resuming
thaws them, deleting kills them and removes the directory.

Where the machine allows it, every box is isolated by the ``isolation``
engine: its own user, mount, PID, IPC and UTS namespaces, set up once per box
by an init process that then starts each command (no per-command set-up).
Inside, the box's directories sit at the vendor's absolute paths (Upstash:
/home/boxuser and /workspace/home; Cloudflare and DeepInfra: /workspace), the
system directories are read-only, /proc shows only the box's processes and
the hostname is the box's name or id.  Root inside maps to ``World.box_uid``
and ``box_gid`` on the host, so whatever the fakes write into a box must be
given to those ids.  Where namespaces are unusable (or ``namespaces=False``)
commands run on the host at host paths, not isolated; ``World.paths_note``
says which, and ``World.isolated`` tells the checks.  Either way a command's
directory is resolved inside the box (fakes.box_paths), never on this machine.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pty
import secrets
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, overload

from fakes import box_paths, host_tmp
from isolation import Bind, BoxSpec, IsolationError, NamespaceBox, NamespaceDriver

logger = logging.getLogger("fakes.world")

CREATING, IDLE, RUNNING, PAUSED, ERROR, DELETED = "creating", "idle", "running", "paused", "error", "deleted"
STATES = (CREATING, IDLE, RUNNING, PAUSED, ERROR, DELETED)
BOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Unisolated commands (host paths) start from this, not from the server's environment, and
# ``env -i`` gives them exactly the box's variables.
_LAUNCH_ENV = {"PATH": BOX_PATH, "LANG": "C.UTF-8"}
# KIT_WORLD_NAMESPACES=off: every world of this process runs unisolated, at host paths.
NAMESPACES_ENV = "KIT_WORLD_NAMESPACES"
# A question put to a box about its own files (``World.probe``) gets at most this long.
PROBE_TIMEOUT_S = 10.0
# One driver per process: whether namespaces work here is probed once.
_DRIVER = NamespaceDriver()
_warned_unisolated = threading.Event()


@dataclass(frozen=True)
class PathLayout:
    """Where a vendor's boxes keep the user's home and the workspace."""

    home: str = "/home/boxuser"
    workspace: str = "/workspace/home"
    user: str = "boxuser"


@dataclass
class Box:
    id: str
    name: str | None
    dir: Path
    owner: str | None = None
    labels: list[str] = field(default_factory=list)
    meta: dict[str, object] = field(default_factory=dict)  # vendor fields (size, runtime, ...)
    state: str = CREATING
    created_at: int = field(default_factory=lambda: int(time.time() * 1000))
    updated_at: int = field(default_factory=lambda: int(time.time() * 1000))
    processes: list[BoxProcess] = field(default_factory=list, repr=False)
    credentials_seen: set[str] = field(default_factory=set, repr=False)
    # Guards ``processes``: a prune racing an append must not lose a running command.
    _plock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # The isolated box's init, started with its first command; None when not running.
    running: NamespaceBox | None = field(default=None, repr=False, compare=False)
    _rlock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def home_dir(self) -> Path:
        return self.dir / "home"

    @property
    def workspace_dir(self) -> Path:
        return self.dir / "workspace"

    @property
    def tmp_dir(self) -> Path:
        return self.dir / "tmp"

    def touch(self) -> None:
        self.updated_at = int(time.time() * 1000)

    def live_processes(self) -> list[BoxProcess]:
        with self._plock:
            self.processes[:] = [p for p in self.processes if p.group_alive()]
            return list(self.processes)

    def add_process(self, proc: BoxProcess) -> None:
        # Commands whose whole group is gone are dropped first: otherwise every command's Popen,
        # pipes and argv stay reachable for the box's lifetime (~2-4 KiB per command).
        self.live_processes()
        with self._plock:
            self.processes.append(proc)


class BoxProcess:
    """One command in a box: binary pipes (or a PTY), and signals for its whole process group.

    With a PTY, ``pty_master`` is the master side: read it for the merged
    output, write it for input; ``stdin``/``stdout``/``stderr`` are then None
    (``stdin`` alone for a command started on /dev/null: ``World.spawn(stdin_null=True)``).
    ``pid`` is the command's pid on this machine (also its process group's
    id); in an isolated box its parent is the box's init, which keeps it
    unreaped until this side knows that pid and reports its exit to ``popen``.
    """

    def __init__(self, popen: subprocess.Popen[bytes], pty_master: int | None = None):
        self.popen = popen
        self.pid = popen.pid
        self.pty_master = pty_master
        self._terminated = False
        self._group_gone = False

    @property
    def stdin(self) -> IO[bytes] | None:
        return self.popen.stdin

    @property
    def stdout(self) -> IO[bytes] | None:
        return self.popen.stdout

    @property
    def stderr(self) -> IO[bytes] | None:
        return self.popen.stderr

    def pipes(self) -> tuple[IO[bytes], IO[bytes], IO[bytes]]:
        """stdin, stdout and stderr of a command spawned without a terminal, its stdin a pipe."""
        stdout, stderr = self.outputs()
        if self.popen.stdin is None:
            raise RuntimeError("this command's stdin is /dev/null (spawned with stdin_null): it has no stdin pipe")
        return self.popen.stdin, stdout, stderr

    def outputs(self) -> tuple[IO[bytes], IO[bytes]]:
        """stdout and stderr of a command spawned without a terminal."""
        stdout, stderr = self.popen.stdout, self.popen.stderr
        if stdout is None or stderr is None:
            raise RuntimeError("this command runs on a PTY, which has no pipes: use pty_master")
        return stdout, stderr

    def owns_group(self) -> bool:
        """Whether process group ``pid`` can still be this command's.

        Boxes remember commands long after they end, and pids are recycled
        (pid_max is often 32768): once the leader is reaped and its group has
        emptied, the number may name another command's group, even another
        box's, and a delete here would SIGKILL it.  While the leader is
        unreaped its pid is held; after that a live process with that pid can
        only be a newcomer, since the kernel keeps a pid free while a group of
        that id has members.  Otherwise any members left are the leader's
        orphans (detached jobs).
        """
        if self._group_gone:
            return False
        if self.popen.returncode is None:
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        self._group_gone = True
        return False

    def signal(self, signum: int) -> None:
        if not self.owns_group():
            return
        try:
            os.killpg(self.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def terminate(self, grace_s: float) -> None:
        """TERM the group, then KILL it after ``grace_s``; only the first call counts."""
        if self._terminated:
            return
        self._terminated = True
        self.signal(signal.SIGTERM)

        def finish() -> None:
            if self.popen.poll() is None or self.group_alive():
                self.signal(signal.SIGKILL)

        timer = threading.Timer(grace_s, finish)
        timer.daemon = True
        timer.start()

    def resize(self, rows: int, cols: int) -> None:
        """Set the PTY size; the kernel then sends SIGWINCH to the foreground group."""
        if self.pty_master is not None and rows > 0 and cols > 0:
            _set_winsize(self.pty_master, rows, cols)

    def poll(self) -> int | None:
        return _shell_code(self.popen.poll())

    def wait(self, timeout: float | None = None) -> int:
        return _shell_code(self.popen.wait(timeout))

    def group_alive(self) -> bool:
        if not self.owns_group():
            return False
        try:
            os.killpg(self.pid, 0)
        except (ProcessLookupError, PermissionError):
            if self.popen.returncode is not None:
                self._group_gone = True  # reaped and empty: the id is free for others from now on
            return False
        return True


def _set_winsize(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _take_controlling_tty() -> None:
    """In the child, after setsid: make the PTY on stdin the session's terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@overload
def _shell_code(code: int) -> int: ...
@overload
def _shell_code(code: None) -> None: ...
def _shell_code(code: int | None) -> int | None:
    """Report a signal death the way a shell does: 128 + N."""
    return 128 - code if code is not None and code < 0 else code


class World:
    """All boxes of one fake service."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        layout: PathLayout | None = None,
        create_delay_s: float = 0.0,
        pause_delay_s: float = 0.0,
        resume_delay_s: float = 0.0,
        namespaces: bool | None = None,
        driver: NamespaceDriver | None = None,
    ):
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="kit-world-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.layout = layout or PathLayout()
        self.create_delay_s = create_delay_s
        self.pause_delay_s = pause_delay_s
        self.resume_delay_s = resume_delay_s
        self._boxes: dict[str, Box] = {}
        self._lock = threading.RLock()
        self.driver = driver or _DRIVER
        self.isolated, self.paths_note = self._setup(namespaces)
        if self.isolated:
            self.driver.warm()
        # The host ids that root inside a box maps to: what the fakes give the files they write.
        self.box_uid, self.box_gid = (
            (self.driver.box_uid, self.driver.box_gid) if self.isolated else (os.geteuid(), os.getegid())
        )

    @property
    def namespaced(self) -> bool:
        """Boxes see the vendor's paths (they are isolated)."""
        return self.isolated

    # -- paths -----------------------------------------------------------------------
    def _setup(self, wanted: bool | None) -> tuple[bool, str]:
        if wanted is None and os.environ.get(NAMESPACES_ENV, "").strip().lower() in ("0", "off", "no", "false"):
            return False, f"host paths ({NAMESPACES_ENV}=off: boxes are not isolated)"
        if wanted is False:
            return False, "host paths (namespaces switched off: boxes are not isolated)"
        ok, why = self.driver.available()
        if ok:
            return True, f"vendor paths {self.layout.home} and {self.layout.workspace} (isolated boxes: {why})"
        if wanted:
            raise RuntimeError(f"isolated boxes were requested but namespaces do not work here: {why}")
        if not _warned_unisolated.is_set():  # once per process, however many worlds
            _warned_unisolated.set()
            logger.warning("boxes are not isolated: %s", why)
        return False, f"host paths (namespaces unavailable: boxes are not isolated: {why})"

    def host_path(self, box: Box, path: str) -> Path:
        """The host file behind an absolute path inside ``box`` (the longest matching area: a world kept
        under /tmp has its boxes' host paths under the box path /tmp too)."""
        pairs = (
            (self.layout.home, box.home_dir),
            (self.layout.workspace, box.workspace_dir),
            ("/tmp", box.tmp_dir),
            (str(box.home_dir), box.home_dir),
            (str(box.workspace_dir), box.workspace_dir),
            (str(box.tmp_dir), box.tmp_dir),
        )
        for inside, outside in sorted(pairs, key=lambda pair: len(pair[0]), reverse=True):
            if path == inside or path.startswith(inside.rstrip("/") + "/"):
                return outside / path[len(inside) :].lstrip("/")
        raise PermissionError(f"{path} is outside the box's home, workspace and tmp")

    def box_home(self, box: Box) -> str:
        return self.layout.home if self.isolated else str(box.home_dir)

    def box_workspace(self, box: Box) -> str:
        return self.layout.workspace if self.isolated else str(box.workspace_dir)

    def _spec(self, box: Box) -> BoxSpec:
        return BoxSpec(
            hostname=(box.name or box.id)[:64],
            binds=(
                Bind(box.home_dir, self.layout.home),
                Bind(box.workspace_dir, self.layout.workspace),
                Bind(box.tmp_dir, "/tmp"),
                Bind(box.tmp_dir, "/var/tmp"),
            ),
        )

    def _running(self, box: Box) -> NamespaceBox:
        """The box's init, started on its first command (again after a kill_all)."""
        with box._rlock:
            if box.running is None or not box.running.alive:
                if box.state == DELETED or not box.dir.is_dir():
                    raise IsolationError(f"box {box.id} is deleted")
                box.running = self.driver.start(self._spec(box))
            return box.running

    def _stop(self, box: Box) -> None:
        with box._rlock:
            running, box.running = box.running, None
        if running is not None:
            left = self.driver.stop(running)
            if left:
                logger.error("box %s: processes %s outlived its init", box.id, left)

    def box_processes(self, box: Box) -> list[int]:
        """Host pids of every process of an isolated box, its init included (empty when not running)."""
        running = box.running
        return self.driver.processes(running) if self.isolated and running is not None else []

    def host_pid(self, box: Box, pid: int) -> int | None:
        """This machine's pid of the process that ``box`` calls ``pid`` ($$, $!), None if none runs.

        An unisolated box runs on the host: its pids are the host's.
        """
        if not self.isolated:
            return pid
        for host in self.box_processes(box):
            try:
                with open(f"/proc/{host}/status") as fh:
                    line = next((ln for ln in fh if ln.startswith("NSpid:")), "")
            except OSError:
                continue
            levels = line.split()[1:]
            if len(levels) >= 2 and int(levels[1]) == pid:
                return host
        return None

    # -- boxes -------------------------------------------------------------------------
    def create(
        self,
        *,
        name: str | None = None,
        owner: str | None = None,
        labels: Iterable[str] = (),
        meta: dict[str, object] | None = None,
        box_id: str | None = None,
    ) -> Box:
        box_id = box_id or "box_" + secrets.token_hex(8)
        box = Box(id=box_id, name=name, dir=self.root / box_id, owner=owner, labels=list(labels), meta=dict(meta or {}))
        for sub in (box.home_dir, box.workspace_dir, box.tmp_dir):
            sub.mkdir(parents=True, exist_ok=True)
            if (self.box_uid, self.box_gid) != (os.geteuid(), os.getegid()):
                os.chown(sub, self.box_uid, self.box_gid)  # the box's root owns its own directories
        os.chmod(box.tmp_dir, 0o1777)
        with self._lock:
            self._boxes[box_id] = box
        self._after(self.create_delay_s, box, CREATING, IDLE)
        return box

    def _prestart(self, box: Box) -> None:
        try:
            self._running(box)
        except OSError as exc:  # the first command tries again and reports it
            logger.warning("box %s: could not start its namespaces: %s", box.id, exc)

    def _after(self, delay: float, box: Box, expect: str, then: str) -> None:
        def move() -> None:
            with self._lock:
                if box.state != expect:
                    return
                box.state = then
                box.touch()
            if expect == CREATING and self.isolated:
                # Set the namespaces up as the box becomes usable, so its first command need not wait.
                threading.Thread(target=self._prestart, args=(box,), name=f"box-start-{box.id}", daemon=True).start()

        if delay <= 0:
            move()
        else:
            timer = threading.Timer(delay, move)
            timer.daemon = True
            timer.start()

    def get(self, key: str, *, include_deleted: bool = False) -> Box | None:
        with self._lock:
            box = self._boxes.get(key) or next(
                (b for b in self._boxes.values() if b.name == key and b.state != DELETED), None
            )
        if box is None or (box.state == DELETED and not include_deleted):
            return None
        return box

    def boxes(self, *, owner: str | None = None, label: str | None = None, include_deleted: bool = False) -> list[Box]:
        with self._lock:
            found = list(self._boxes.values())
        return [
            b
            for b in found
            if (include_deleted or b.state != DELETED)
            and (owner is None or b.owner == owner)
            and (label is None or label in b.labels)
        ]

    def state(self, box: Box) -> str:
        if box.state in (IDLE, RUNNING):
            return RUNNING if any(p.popen.poll() is None for p in box.live_processes()) else IDLE
        return box.state

    def set_state(self, box: Box, state: str) -> None:
        """Force a state behind the client's back (a scripted fault)."""
        if state not in STATES:
            raise ValueError(f"unknown state {state!r}; one of {STATES}")
        if state == DELETED:
            self.delete(box)
            return
        if state == PAUSED:
            self._freeze(box, True)
        elif box.state == PAUSED:
            self._freeze(box, False)
        with self._lock:
            box.state = state
            box.touch()

    def pause(self, box: Box) -> None:
        self._freeze(box, True)
        with self._lock:
            box.state = "pausing" if self.pause_delay_s > 0 else PAUSED
            box.touch()
        self._after(self.pause_delay_s, box, "pausing", PAUSED)

    def resume(self, box: Box) -> None:
        self._freeze(box, False)
        with self._lock:
            box.state = "resuming" if self.resume_delay_s > 0 else IDLE
            box.touch()
        self._after(self.resume_delay_s, box, "resuming", IDLE)

    def _freeze(self, box: Box, stop: bool) -> None:
        """SIGSTOP (or SIGCONT) every process of the box: through its init, all of its PID namespace."""
        running = box.running
        if self.isolated and running is not None:
            with contextlib.suppress(IsolationError):
                (self.driver.freeze if stop else self.driver.thaw)(running)
                return
        self._signal_all(box, signal.SIGSTOP if stop else signal.SIGCONT)

    def delete(self, box: Box) -> None:
        # Deleted first: a command that dies of the delete must find its box deleted.
        with self._lock:
            box.state = DELETED
            box.touch()
        self._stop(box)  # the init's end ends every process of the box's PID namespace
        self._signal_all(box, signal.SIGCONT)
        self._signal_all(box, signal.SIGKILL)
        shutil.rmtree(box.dir, ignore_errors=True)
        if not self.isolated:
            host_tmp.sweep([box.home_dir])

    def _signal_all(self, box: Box, signum: int) -> None:
        for proc in box.live_processes():
            proc.signal(signum)

    # -- commands ----------------------------------------------------------------------
    def spawn(
        self,
        box: Box,
        *,
        cmd: str | None = None,
        argv: Sequence[str] | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        login: bool = True,
        tty: bool = False,
        rows: int | None = None,
        cols: int | None = None,
        stdin_null: bool = False,
    ) -> BoxProcess:
        """Start a command in ``box``: ``cmd`` through ``bash -lc`` (or ``-c``), or ``argv`` as is.

        ``tty`` runs it on a new PTY (sized ``rows`` x ``cols``, default 24 x 80) that
        becomes its controlling terminal, so stdout and stderr are merged; otherwise its
        stdin is a pipe (``stdin`` of the BoxProcess), or /dev/null with ``stdin_null``.  ``cwd``
        (default: the box's home) is resolved inside the box (fakes.box_paths); one
        the box does not have raises ``box_paths.NotInBox``, never a start in /.
        """
        if argv:
            command = list(argv)
        elif cmd is not None:
            command = ["bash", "-lc" if login else "-c", cmd]
        else:
            raise ValueError("spawn needs cmd or argv")
        base_env = {
            "HOME": self.box_home(box),
            "USER": self.layout.user,
            "LOGNAME": self.layout.user,
            "SHELL": "/bin/bash",
            "PATH": BOX_PATH,
            "LANG": "C.UTF-8",
            "TERM": "xterm-256color" if tty else "dumb",
            "TMPDIR": "/tmp" if self.isolated else str(box.tmp_dir),
        }
        merged = {**base_env, **(env or {})}
        where = box_paths.start_dir(self, box, cwd or self.box_home(box))
        stdin = subprocess.DEVNULL if stdin_null else subprocess.PIPE
        proc = (
            self._spawn_isolated(box, command, merged, where, tty, rows, cols, stdin)
            if self.isolated
            else self._spawn_on_host(box, command, merged, where, tty, rows, cols, stdin)
        )
        box.add_process(proc)
        with self._lock:
            box.touch()
        return proc

    def _spawn_isolated(
        self,
        box: Box,
        command: list[str],
        env: dict[str, str],
        cwd: str,
        tty: bool,
        rows: int | None,
        cols: int | None,
        stdin: int,
    ) -> BoxProcess:
        running = self._running(box)
        if not tty:
            popen = self.driver.spawn(
                running,
                command,
                env=env,
                cwd=cwd,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            return BoxProcess(popen)
        master, slave = self.driver.open_pty(running)
        try:
            _set_winsize(slave, rows or 24, cols or 80)
            popen = self.driver.spawn(
                running, command, env=env, cwd=cwd, stdin=slave, stdout=slave, stderr=slave, tty=True
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)  # the command holds it now; keeping it would hide the command's exit (no EIO)
        return BoxProcess(popen, pty_master=master)

    def _spawn_on_host(
        self,
        box: Box,
        command: list[str],
        env: dict[str, str],
        cwd: str,
        tty: bool,
        rows: int | None,
        cols: int | None,
        stdin: int,
    ) -> BoxProcess:
        args = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env.items()), *command]
        host_cwd = cwd  # already resolved inside the box and mapped to its host directory (spawn)
        if not tty:
            popen = subprocess.Popen(
                args,
                cwd=host_cwd,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                bufsize=0,
                env=_LAUNCH_ENV,
            )
            return BoxProcess(popen)
        master, slave = pty.openpty()
        try:
            _set_winsize(slave, rows or 24, cols or 80)
            popen = subprocess.Popen(
                args,
                cwd=host_cwd,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=_LAUNCH_ENV,
                start_new_session=True,
                preexec_fn=_take_controlling_tty,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        return BoxProcess(popen, pty_master=master)

    def probe(self, box: Box, argv: Sequence[str]) -> bool:
        """Whether ``argv`` exits 0 inside the isolated ``box`` (from /, no input or output, a bounded wait):
        how the fakes ask a box about its own filesystem outside its home, workspace and /tmp."""
        if not self.isolated:
            raise RuntimeError("an unisolated box has no filesystem of its own to ask")
        popen = self.driver.spawn(
            self._running(box),
            list(argv),
            env=dict(_LAUNCH_ENV),
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            return popen.wait(PROBE_TIMEOUT_S) == 0
        except subprocess.TimeoutExpired:
            popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(PROBE_TIMEOUT_S)
            return False

    def kill_all(self) -> None:
        """Kill every process of every box (the boxes and their files stay)."""
        for box in self.boxes(include_deleted=True):
            self._stop(box)
            self._signal_all(box, signal.SIGCONT)
            self._signal_all(box, signal.SIGKILL)

    def close(self) -> None:
        """Kill every box's processes and remove the world's directory (and, unisolated, what Hermes left
        for its boxes in this machine's /tmp)."""
        self.kill_all()
        if not self.isolated:
            host_tmp.sweep(box.home_dir for box in self.boxes(include_deleted=True))
        shutil.rmtree(self.root, ignore_errors=True)
