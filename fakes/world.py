"""The box world under every fake vendor service.

A box is a directory on this machine with its own HOME, workspace and tmp.
Commands are local bash (or an argv) started in their own process group, so a
signal reaches the whole tree, while detached ``nohup ... &`` children survive
the command that started them.  Boxes move through creating, idle/running,
paused, error and deleted, with configurable transition delays; pausing
freezes a box's processes (SIGSTOP) and resuming thaws them, deleting kills
them and removes the directory.

Where Linux mount namespaces are available (root, or unprivileged user
namespaces), each command runs in a private mount namespace chrooted into a
view of this machine in which the box's directories sit at the vendor's
absolute paths (Upstash: /home/boxuser and /workspace/home).  Elsewhere
commands see host paths; ``World.paths_note`` says which, and why.  Either
way this is a test double, not an isolation boundary.
"""

from __future__ import annotations

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

logger = logging.getLogger("fakes.world")

CREATING, IDLE, RUNNING, PAUSED, ERROR, DELETED = "creating", "idle", "running", "paused", "error", "deleted"
STATES = (CREATING, IDLE, RUNNING, PAUSED, ERROR, DELETED)
BOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The launcher chain (unshare, sh, chroot, env -i) starts from this, not from the
# server's environment: boxes share this machine's /proc, and a process whose
# initial environment held the server's secrets would show them in /proc/*/environ.
_LAUNCH_ENV = {"PATH": BOX_PATH, "LANG": "C.UTF-8"}
_SYSTEM_DIRS = ("usr", "etc", "opt")
_LINKED_DIRS = ("bin", "lib", "lib32", "lib64", "libx32", "sbin")

# Runs inside the new mount namespace: bind the system and the box into the
# box's root view, then chroot and exec the command with a clean environment.
_ENTER = r"""
set -e
root=$1; box=$2; home=$3; work=$4; cwd=$5; shift 5
mount --make-rprivate /
for d in usr etc opt; do [ -d "/$d" ] && mount --rbind "/$d" "$root/$d"; done
for d in bin lib lib32 lib64 libx32 sbin; do
  if [ -d "/$d" ] && [ ! -L "/$d" ]; then mount --rbind "/$d" "$root/$d"; fi
done
mount --rbind /proc "$root/proc"; mount --rbind /dev "$root/dev"
mount --bind "$box/home" "$root$home"; mount --bind "$box/workspace" "$root$work"; mount --bind "$box/tmp" "$root/tmp"
cd "$root"
exec chroot "$root" /bin/sh -c 'cd "$0" 2>/dev/null || cd /; exec "$@"' "$cwd" "$@"
"""


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
    output, write it for input; ``stdin``/``stdout``/``stderr`` are then None.
    """

    def __init__(self, popen: subprocess.Popen[bytes], pty_master: int | None = None):
        self.popen = popen
        self.pid = popen.pid
        self.pty_master = pty_master
        self._terminated = False
        self._group_gone = False

    @property
    def stdin(self):  # type: ignore[no-untyped-def]
        return self.popen.stdin

    @property
    def stdout(self):  # type: ignore[no-untyped-def]
        return self.popen.stdout

    @property
    def stderr(self):  # type: ignore[no-untyped-def]
        return self.popen.stderr

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
        return _shell_code(self.popen.wait(timeout))  # type: ignore[return-value]

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


def _shell_code(code: int | None) -> int | None:
    """Report a signal death the way a shell does: 128 + N."""
    return 128 - code if code is not None and code < 0 else code


class World:
    """All boxes of one fake service."""

    def __init__(self, root: Path | None = None, *, layout: PathLayout | None = None,
                 create_delay_s: float = 0.0, pause_delay_s: float = 0.0, resume_delay_s: float = 0.0,
                 namespaces: bool | None = None):
        self.root = Path(root) if root else Path(tempfile.mkdtemp(prefix="kit-world-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.layout = layout or PathLayout()
        self.create_delay_s = create_delay_s
        self.pause_delay_s = pause_delay_s
        self.resume_delay_s = resume_delay_s
        self._boxes: dict[str, Box] = {}
        self._lock = threading.RLock()
        self._view = self.root / ".view"
        self._enter = self.root / ".enter.sh"
        self.namespaced, self.paths_note = self._setup_paths(namespaces)

    # -- paths -----------------------------------------------------------------------
    def _setup_paths(self, wanted: bool | None) -> tuple[bool, str]:
        if wanted is False:
            return False, "host paths (mount namespaces switched off)"
        self._build_view()
        self._enter.write_text(_ENTER)
        probe = self.root / ".probe"
        for sub in ("home", "workspace", "tmp"):
            (probe / sub).mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.run([*self._ns_prefix(probe, "/"), "/bin/true"], capture_output=True, timeout=10)
            ok, why = proc.returncode == 0, proc.stderr.decode(errors="replace").strip()[-200:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            ok, why = False, str(exc)
        if ok:
            return True, f"vendor paths {self.layout.home} and {self.layout.workspace} (private mount namespaces)"
        if wanted:
            raise RuntimeError(f"mount namespaces were requested but do not work here: {why}")
        return False, f"host paths (mount namespaces unavailable: {why or 'unshare failed'})"

    def _build_view(self) -> None:
        view = self._view
        for sub in (*_SYSTEM_DIRS, "proc", "dev", "tmp", "run", "var/tmp",
                    self.layout.home.lstrip("/"), self.layout.workspace.lstrip("/")):
            (view / sub).mkdir(parents=True, exist_ok=True)
        for name in _LINKED_DIRS:
            host, link = Path("/", name), view / name
            if host.is_symlink() and not link.is_symlink():
                link.symlink_to(os.readlink(host))
            elif host.is_dir() and not host.is_symlink():
                link.mkdir(exist_ok=True)  # bound below only if present; rare on merged-/usr systems

    def _ns_prefix(self, box_dir: Path, cwd: str) -> list[str]:
        userns = [] if os.geteuid() == 0 else ["--map-root-user"]
        return ["unshare", "--mount", *userns, "--", "/bin/sh", str(self._enter), str(self._view),
                str(box_dir), self.layout.home, self.layout.workspace, cwd]

    def host_path(self, box: Box, path: str) -> Path:
        """The host file behind an absolute path inside ``box``."""
        for inside, outside in ((self.layout.home, box.home_dir), (self.layout.workspace, box.workspace_dir),
                                ("/tmp", box.tmp_dir), (str(box.home_dir), box.home_dir),
                                (str(box.workspace_dir), box.workspace_dir), (str(box.tmp_dir), box.tmp_dir)):
            if path == inside or path.startswith(inside.rstrip("/") + "/"):
                return outside / path[len(inside):].lstrip("/")
        raise PermissionError(f"{path} is outside the box's home, workspace and tmp")

    def box_home(self, box: Box) -> str:
        return self.layout.home if self.namespaced else str(box.home_dir)

    def box_workspace(self, box: Box) -> str:
        return self.layout.workspace if self.namespaced else str(box.workspace_dir)

    # -- boxes -------------------------------------------------------------------------
    def create(self, *, name: str | None = None, owner: str | None = None, labels: Iterable[str] = (),
               meta: dict[str, object] | None = None, box_id: str | None = None) -> Box:
        box_id = box_id or "box_" + secrets.token_hex(8)
        box = Box(id=box_id, name=name, dir=self.root / box_id, owner=owner, labels=list(labels),
                  meta=dict(meta or {}))
        for sub in (box.home_dir, box.workspace_dir, box.tmp_dir):
            sub.mkdir(parents=True, exist_ok=True)
        os.chmod(box.tmp_dir, 0o1777)
        with self._lock:
            self._boxes[box_id] = box
        self._after(self.create_delay_s, box, CREATING, IDLE)
        return box

    def _after(self, delay: float, box: Box, expect: str, then: str) -> None:
        def move() -> None:
            with self._lock:
                if box.state == expect:
                    box.state = then
                    box.touch()

        if delay <= 0:
            move()
        else:
            timer = threading.Timer(delay, move)
            timer.daemon = True
            timer.start()

    def get(self, key: str, *, include_deleted: bool = False) -> Box | None:
        with self._lock:
            box = self._boxes.get(key) or next((b for b in self._boxes.values()
                                                if b.name == key and b.state != DELETED), None)
        if box is None or (box.state == DELETED and not include_deleted):
            return None
        return box

    def boxes(self, *, owner: str | None = None, label: str | None = None,
              include_deleted: bool = False) -> list[Box]:
        with self._lock:
            found = list(self._boxes.values())
        return [b for b in found if (include_deleted or b.state != DELETED)
                and (owner is None or b.owner == owner) and (label is None or label in b.labels)]

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
            self._signal_all(box, signal.SIGSTOP)
        elif box.state == PAUSED:
            self._signal_all(box, signal.SIGCONT)
        with self._lock:
            box.state = state
            box.touch()

    def pause(self, box: Box) -> None:
        self._signal_all(box, signal.SIGSTOP)
        with self._lock:
            box.state = "pausing" if self.pause_delay_s > 0 else PAUSED
            box.touch()
        self._after(self.pause_delay_s, box, "pausing", PAUSED)

    def resume(self, box: Box) -> None:
        self._signal_all(box, signal.SIGCONT)
        with self._lock:
            box.state = "resuming" if self.resume_delay_s > 0 else IDLE
            box.touch()
        self._after(self.resume_delay_s, box, "resuming", IDLE)

    def delete(self, box: Box) -> None:
        self._signal_all(box, signal.SIGCONT)
        self._signal_all(box, signal.SIGKILL)
        with self._lock:
            box.state = DELETED
            box.touch()
        shutil.rmtree(box.dir, ignore_errors=True)

    def _signal_all(self, box: Box, signum: int) -> None:
        for proc in box.live_processes():
            proc.signal(signum)

    # -- commands ----------------------------------------------------------------------
    def spawn(self, box: Box, *, cmd: str | None = None, argv: Sequence[str] | None = None, cwd: str | None = None,
              env: dict[str, str] | None = None, login: bool = True, tty: bool = False,
              rows: int | None = None, cols: int | None = None) -> BoxProcess:
        """Start a command in ``box``: ``cmd`` through ``bash -lc`` (or ``-c``), or ``argv`` as is.

        ``tty`` runs it on a new PTY (sized ``rows`` x ``cols``, default 24 x 80) that
        becomes its controlling terminal, so stdout and stderr are merged.
        """
        if argv:
            command = list(argv)
        elif cmd is not None:
            command = ["bash", "-lc" if login else "-c", cmd]
        else:
            raise ValueError("spawn needs cmd or argv")
        base_env = {"HOME": self.box_home(box), "USER": self.layout.user, "LOGNAME": self.layout.user,
                    "SHELL": "/bin/bash", "PATH": BOX_PATH, "LANG": "C.UTF-8",
                    "TERM": "xterm-256color" if tty else "dumb",
                    "TMPDIR": "/tmp" if self.namespaced else str(box.tmp_dir)}
        merged = {**base_env, **(env or {})}
        where = cwd or self.box_home(box)
        env_argv = ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in merged.items())]
        if self.namespaced:
            args = self._ns_prefix(box.dir, where) + env_argv + command
            host_cwd = None
        else:
            args = env_argv + command
            host_cwd = where if Path(where).is_dir() else str(box.home_dir)
        if tty:
            master, slave = pty.openpty()
            try:
                _set_winsize(slave, rows or 24, cols or 80)
                popen = subprocess.Popen(args, cwd=host_cwd, stdin=slave, stdout=slave, stderr=slave, env=_LAUNCH_ENV,
                                         start_new_session=True, preexec_fn=_take_controlling_tty)
            except BaseException:
                os.close(master)
                raise
            finally:
                os.close(slave)  # the child holds it now; keeping it would hide the child's exit (no EIO)
            proc = BoxProcess(popen, pty_master=master)
        else:
            popen = subprocess.Popen(args, cwd=host_cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True, bufsize=0, env=_LAUNCH_ENV)
            proc = BoxProcess(popen)
        box.add_process(proc)
        with self._lock:
            box.touch()
        return proc

    def kill_all(self) -> None:
        """Kill every process of every box (the boxes and their files stay)."""
        for box in self.boxes(include_deleted=True):
            self._signal_all(box, signal.SIGCONT)
            self._signal_all(box, signal.SIGKILL)

    def close(self) -> None:
        """Kill every box's processes and remove the world's directory."""
        self.kill_all()
        shutil.rmtree(self.root, ignore_errors=True)
