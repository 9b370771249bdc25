"""Per-box locks: one mutation of a box at a time, and a stuck one says who holds it.

A box's lock is ``runtime_dir/NAME/lock``, held with an exclusive ``flock``.
The holder writes who it is into the file (PID, the action, its command line,
since when).  A second mutating command does not wait: it fails at once with
a BoxLocked naming that PID, command and time.  A lock whose owner has exited
needs no cleaning: the kernel drops a flock when its holder's last descriptor
closes, so the next command takes it (and notes that it recovered the stale
record).  The descriptor is close-on-exec, so a daemon started while the lock
is held does not keep it.

Within one process the lock is re-entrant: ``BoxManager.create`` may take it
inside ``load``'s hold on the same box.  The file is never unlinked while in
use except by ``remove_lock_file`` under the lock; an acquirer that finds the
file replaced after its flock retries on the new one, so two holders can
never each hold a different inode.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import shlex
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from reference.box_lite.errors import BoxLocked
from reference.box_lite.paths import BoxHome
from reference.box_lite.records import human_age, parse_stamp, utc_now


@dataclass(frozen=True)
class Holder:
    """Who holds (or held) a lock, as its file records."""

    pid: int
    action: str
    command: str
    since: str

    def alive(self) -> bool:
        return pid_alive(self.pid)

    def age(self) -> str:
        """How long ago ``since`` was, in words (``3 min``), or '' when unknown."""
        then = parse_stamp(self.since)
        if then is None:
            return ""
        return human_age((dt.datetime.now(dt.UTC) - then).total_seconds())

    def describe(self) -> str:
        age = self.age()
        when = f"since {self.since}" + (f" ({age} ago)" if age else "")
        return f"PID {self.pid} running `{self.command}` ({self.action}) {when}"


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def command_line() -> str:
    """This process's command as a user would type it (argv[0] shortened to its name)."""
    argv = list(sys.argv) or ["python"]
    argv[0] = os.path.basename(argv[0]) or argv[0]
    if argv[0] in ("cli.py", "__main__.py", "-m", "-c"):
        argv[0] = "hermes-box"
    text = shlex.join(argv)
    return text if len(text) <= 200 else text[:197] + "..."


def read_holder(path: Path) -> Holder | None:
    """The record in a lock file; None when it is empty, missing or unreadable."""
    try:
        data = json.loads(path.read_text("utf-8") or "null")
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    try:
        return Holder(int(data["pid"]), str(data["action"]), str(data["command"]), str(data["since"]))
    except (KeyError, TypeError, ValueError):
        return None


# Locks this process holds: path -> (descriptor, depth).  Guarded by _held_guard.
_held: dict[str, list[int]] = {}
_held_guard = threading.Lock()


class BoxLock:
    """The lock of box ``name``; use as a context manager or with acquire()/release()."""

    def __init__(self, home: BoxHome, name: str, action: str) -> None:
        self.name = name
        self.action = action
        self.path = home.run(name).lock
        self.recovered: Holder | None = None
        self._owned = False

    def __enter__(self) -> BoxLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def acquire(self, timeout: float = 0.0) -> None:
        """Take the lock; a BoxLocked naming the holder if another process has it for ``timeout`` s."""
        key = str(self.path)
        with _held_guard:
            held = _held.get(key)
            if held is not None:
                held[1] += 1
                self._owned = True
                return
        deadline = time.monotonic() + timeout
        while True:
            fd = self._try_take()
            if fd is not None:
                break
            if time.monotonic() >= deadline:
                raise self._locked_error()
            time.sleep(0.05)
        previous = read_holder(self.path)
        if previous is not None and previous.pid != os.getpid():
            self.recovered = previous  # its owner exited (or closed it) without clearing the record
        record = {"pid": os.getpid(), "action": self.action, "command": command_line(), "since": utc_now()}
        data = (json.dumps(record) + "\n").encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        with _held_guard:
            _held[key] = [fd, 1]
        self._owned = True

    def _try_take(self) -> int | None:
        """A descriptor holding the flock on the current lock file, or None if another holds it."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        for _ in range(20):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    return None
                raise
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if same:
                return fd
            os.close(fd)  # the file was removed or replaced after we opened it: take the new one
        return None

    def _locked_error(self) -> BoxLocked:
        holder = None
        for _ in range(10):  # the holder writes its record just after taking the flock
            holder = read_holder(self.path)
            if holder is not None:
                break
            time.sleep(0.02)
        who = holder.describe() if holder is not None else "another process (its record is not written yet)"
        pid_hint = f"or end PID {holder.pid} if it is stuck; " if holder is not None else ""
        return BoxLocked(
            f"box {self.name} is locked by {who}",
            "another command is changing this box; one change at a time keeps it consistent",
            f"wait for it to finish and retry, {pid_hint}the lock frees itself when its owner exits",
        )

    def release(self) -> None:
        if not self._owned:
            return
        self._owned = False
        key = str(self.path)
        with _held_guard:
            held = _held.get(key)
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del _held[key]
        fd = held[0]
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # an empty record: nobody holds it
        os.close(fd)

    @property
    def held(self) -> bool:
        return self._owned


def lock_state(home: BoxHome, name: str) -> tuple[str, Holder | None]:
    """("free" | "held" | "stale", holder) for box ``name`` without taking or disturbing its lock.

    "stale": the file records a holder but no process holds the flock (its owner exited; the next
    command recovers it).  Held is read from /proc/locks (the kernel's list of flocks).
    """
    path = home.run(name).lock
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "free", None
    holder = read_holder(path)
    held = _listed_in_proc_locks(st)
    if held is None:  # no /proc/locks: probe with a shared lock, released at once
        held = flock_held(path)
    if held:
        return "held", holder
    return ("stale", holder) if holder is not None else ("free", None)


def _listed_in_proc_locks(st: os.stat_result) -> bool | None:
    """Whether the kernel lists an flock on the file with ``st``; None when /proc/locks cannot be read."""
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF" (blocked waiters have "->" first)
        if "->" in parts:
            continue
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == ident:
            return True
    return False


def flock_held(path: Path) -> bool:
    """Whether some process holds an exclusive flock on ``path`` (a missing file: no).

    Probes with a shared flock taken and dropped at once: an exclusive ``LOCK_NB`` taker racing the
    probe fails for that moment, so callers that must not disturb a lock (``lock_state``) read
    /proc/locks first, and the daemon retries its claim of daemon.pid.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)
    return False


def remove_lock_file(lock: BoxLock) -> None:
    """Unlink a held lock's file (when its box is removed); acquirers racing this retry on a new file."""
    if lock.held:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock.path)


def describe(state: tuple[str, Holder | None]) -> str:
    """A line for doctor and errors: ``free``, ``held by PID ...``, ``stale record of PID ...``."""
    kind, holder = state
    if kind == "held" and holder is not None:
        return f"held by {holder.describe()}"
    if kind == "stale" and holder is not None:
        return f"free (stale record of exited PID {holder.pid}, recovered by the next command)"
    return kind
