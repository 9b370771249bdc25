"""Shared fixtures of the Box Lite tests: a temp home, and a teardown that stops every box daemon.

``box_home`` is an empty Box Lite home under the test's tmp dir, also set as
``HERMES_BOX_HOME`` (so a ``hermes-box`` subprocess uses it); ``tmpdir_root`` is
the archive tests' TMPDIR (nothing may be left in it, nor a child running).  At teardown every
daemon found under its runtime directory is asked to stop (SIGTERM: a clean
stop, as ``hermes-box stop``), and the test fails if any daemon or box init
survives that; survivors are then killed, so no run leaves a process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.archives.conftest import tmpdir_root  # noqa: F401  # a private TMPDIR, found empty at teardown

DAEMON_MODULE = b"reference.box_lite.daemon"
STOP_WAIT_S = 15.0


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent's wait counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def box_processes(home: Path) -> dict[str, int]:
    """The live daemons and box inits recorded under ``home``'s runtime directory: description -> host pid."""
    found: dict[str, int] = {}
    run = home / "run"
    if not run.is_dir():
        return found
    for box in sorted(p for p in run.iterdir() if p.is_dir()):
        daemon = _read_pid(box / "daemon.pid")
        if daemon and _alive(daemon) and DAEMON_MODULE in _cmdline(daemon):
            found[f"daemon of {box.name}"] = daemon
        init = _read_pid(box / "init.pid")
        if init and _is_box_init(init):
            found[f"init of {box.name}"] = init
    return found


def _is_box_init(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "box-init" and _alive(pid)
    except OSError:
        return False


def mentioning(path: Path) -> dict[str, int]:
    """Live processes whose command line names ``path`` (a daemon's --box-dir is under its home)."""
    needle = os.fsencode(str(path))
    found: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            line = _cmdline(int(entry))
            if needle in line and _alive(int(entry)):
                found[f"{_named(int(entry))}: " + line.replace(b"\0", b" ").decode(errors="replace")[:200]] = int(entry)
    return found


def _named(pid: int) -> str:
    """What a process is beyond its command line (a fork keeps its parent's): its name, state and parent."""
    try:
        comm, rest = Path(f"/proc/{pid}/stat").read_text().split(" (", 1)[1].rsplit(") ", 1)
        state, ppid = rest.split()[:2]
    except (OSError, IndexError, ValueError):
        return "?"
    parent = _cmdline(int(ppid))[:60].replace(b"\0", b" ").decode(errors="replace")
    return f"{comm} [{state}, parent {ppid}: {parent}]"


def stop_all(home: Path) -> dict[str, int]:
    """Stop every daemon under ``home`` cleanly; returns what survived the stop (then killed)."""
    for what, pid in box_processes(home).items():
        if what.startswith("daemon"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    # Its daemon's forks (a box's set-up chain) end a moment after a box whose daemon was killed outright.
    while (box_processes(home) or mentioning(home)) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = {**box_processes(home), **mentioning(home)}
    for pid in survivors.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return survivors


@pytest.fixture
def box_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty Box Lite home (HERMES_BOX_HOME); every box daemon under it is stopped at teardown."""
    home = tmp_path / "box-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_BOX_HOME", str(home))
    yield home
    survivors = stop_all(home)
    assert not survivors, f"box processes survived a stop of every daemon: {survivors}"


@pytest.fixture
def manager(box_home: Path) -> Any:
    """A BoxManager of ``box_home`` (default settings unless the test writes box.env first)."""
    from reference.box_lite.boxes import BoxManager
    from reference.box_lite.paths import BoxHome

    return BoxManager(BoxHome.at(box_home))
