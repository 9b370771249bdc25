"""Processes a run left on this machine, found by the run's own directory, and ended.

A local backend runs commands on this machine; when it fails to kill what it
started (a timed-out command's children, a detached job, a heartbeat loop),
those processes outlive the run.  Every sandbox-side path of a local run lies
under the run's directory (box homes, TMPDIR, the working directory), so a
process of the run is one whose working directory, executable, arguments or
HOME/TMPDIR/PWD lie under it.  ``end_processes_under`` stops each such process
with SIGSTOP (so a loop cannot start new children), then SIGKILLs it; it
never touches this process or its ancestors, and reads only processes of
this user.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

_ENV_NAMES = (b"HOME=", b"TMPDIR=", b"PWD=")


def _ancestors() -> set[int]:
    found, pid = {os.getpid()}, os.getpid()
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        found.add(pid)
    return found


def _under(path: str, root: str) -> bool:
    path = path.removesuffix(" (deleted)")
    return path == root or path.startswith(root + "/")


def belongs(pid: int, root: str) -> bool:
    """Whether process ``pid`` works under ``root`` (its cwd, executable, an argument, HOME, TMPDIR or PWD)."""
    base = f"/proc/{pid}"
    try:
        for link in ("cwd", "exe"):
            try:
                if _under(os.readlink(f"{base}/{link}"), root):
                    return True
            except OSError:
                continue
        with open(f"{base}/cmdline", "rb") as f:
            if any(_under(os.fsdecode(arg), root) for arg in f.read().split(b"\0") if arg.startswith(b"/")):
                return True
        with open(f"{base}/environ", "rb") as f:
            for entry in f.read().split(b"\0"):
                if entry.startswith(_ENV_NAMES) and _under(os.fsdecode(entry.split(b"=", 1)[1]), root):
                    return True
    except OSError:
        return False
    return False


def descendants(root: int | None = None) -> list[int]:
    """Every live process below pid ``root`` (default: this process), sorted; zombies included, since
    an unreaped child is a leak too."""
    root = root or os.getpid()
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == pid]
        found += kids
        frontier += kids
    return sorted(found)


def processes_under(root: str | Path) -> list[int]:
    """Pids of this user's processes (other than this one and its ancestors) that belong to ``root``."""
    if not Path("/proc/self").exists():
        return []
    root = os.path.realpath(str(root))
    uid, skip = os.getuid(), _ancestors()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in skip:
            continue
        pid = int(entry)
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
        except OSError:
            continue
        if belongs(pid, root):
            found.append(pid)
    return found


def end_processes_under(root: str | Path, *, rounds: int = 5) -> list[int]:
    """Stop and kill every process that belongs to ``root``; the pids ended."""
    ended: list[int] = []
    for _ in range(rounds):
        pids = processes_under(root)
        if not pids:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
        ended.extend(p for p in pids if p not in ended)
        time.sleep(0.05)
    return ended


# A run root's owner: "<pid> <start ticks>" of the process that made it.  A root whose owner is gone
# (SIGKILL, a lost machine: no cleanup ran) is removed by the next run that makes one.
OWNER_FILE = ".kit-owner"


def _started(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def claim(root: Path) -> None:
    """Mark ``root`` as this process's run root."""
    (root / OWNER_FILE).write_text(f"{os.getpid()} {_started(os.getpid())}\n")


def sweep_orphaned(parent: Path, prefix: str) -> list[Path]:
    """Remove ``parent``'s run roots named ``prefix*`` whose owner process is gone, and any process still
    running under them; roots without an owner mark are left alone (another kit, or one being made)."""
    removed = []
    for root in parent.glob(f"{prefix}*"):
        try:
            pid_text, started = (root / OWNER_FILE).read_text().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            continue
        if _started(pid) == started:
            continue  # its owner still runs
        end_processes_under(root)
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed
