"""The harness's view of Box Lite boxes under one home: list them, find one, disturb it.

Read from the box manager's own files, never through reference/ (the kit does
not import reference backends):

    <home>/config/registry.json          {"format": 1, "boxes": {NAME: {"nonce": ...}}}
    <home>/data/boxes/NAME/box.json      {"name", "created_by": {"nonce"}, "stopped_cleanly"}
    <home>/data/boxes/NAME/data/home     the box's /home/agent
    <home>/run/NAME/daemon.pid           flock-held by the box's daemon while it runs

A box is running while a daemon holds its pid file, stopped when none does
and box.json records a clean stop, and broken otherwise (a daemon that died
without a stop, a directory or box.json missing, a registry that disagrees).
In the kit's words: running, paused (stopped) and error (broken); a box that
is neither registered nor on disk is deleted.

Disturbances go through the ``hermes-box`` command as a user would run it
(``stop``, ``rm --force``), and breaking a box kills its daemon with SIGKILL,
which ends every process of the box with it and leaves box.json saying the box
was running.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from fakes.world_view import WorldView

KIT_STATES = {"running": "running", "stopped": "paused", "broken": "error"}
COMMAND_TIMEOUT_S = 60.0
DAEMON_EXIT_S = 15.0
DAEMON_MODULE = b"reference.box_lite.daemon"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _nonce(record: dict[str, Any] | None) -> str | None:
    if record is None:
        return None
    by = record.get("created_by")
    value = by.get("nonce") if isinstance(by, dict) else record.get("nonce")
    return value if isinstance(value, str) else None


def _held(pid_file: Path) -> int | None:
    """The pid recorded in ``pid_file`` while a live process holds its flock (0: held, not written yet);
    None when nobody holds it (the kernel drops the flock when its holder dies)."""
    try:
        with open(pid_file, "rb") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                first = fh.read(32).split()[:1]
                return int(first[0]) if first and first[0].isdigit() else 0
            return None  # closing the file lets go of the shared lock just taken
    except OSError:
        return None


class BoxLiteWorld(WorldView):
    """The boxes of one Box Lite home, for the kit's checks (see the module docstring).

    There is no service and so no transport to script: this view has no fault script.  Its
    boxes are isolated wherever they run at all: the box manager has no unisolated fallback (a
    machine without usable namespaces cannot start a box).
    """

    vendor = "box_lite"
    capabilities = frozenset({"world", "world-states", "isolation"})

    def __init__(self, home: Path):  # no super().__init__: there are no transport faults to script
        self.home = Path(home)

    # -- paths -----------------------------------------------------------------------------
    def _box_dir(self, name: str) -> Path:
        return self.home / "data" / "boxes" / name

    def _pid_file(self, name: str) -> Path:
        return self.home / "run" / name / "daemon.pid"

    def _registry(self) -> dict[str, dict[str, Any]]:
        boxes = (_read_json(self.home / "config" / "registry.json") or {}).get("boxes")
        return {k: v for k, v in boxes.items() if isinstance(v, dict)} if isinstance(boxes, dict) else {}

    # -- what the manager says -----------------------------------------------------------------
    def _names(self, registry: dict[str, dict[str, Any]]) -> list[str]:
        names = set(registry)
        with contextlib.suppress(OSError):
            names |= {p.name for p in (self.home / "data" / "boxes").iterdir() if (p / "box.json").is_file()}
        return sorted(names)

    def state(self, name: str, registry: dict[str, dict[str, Any]] | None = None) -> str:
        """The box's state in Box Lite's words (running, stopped, broken), or "deleted"."""
        entry = (self._registry() if registry is None else registry).get(name)
        box_dir = self._box_dir(name)
        if entry is None and not box_dir.is_dir():
            return "deleted"
        info = _read_json(box_dir / "box.json")
        whole = (
            entry is not None
            and info is not None
            and info.get("name") == name
            and (box_dir / "data").is_dir()
            and _nonce(entry) in (None, _nonce(info))
        )
        if _held(self._pid_file(name)) is not None:
            return "running" if whole else "broken"
        return "stopped" if whole and info is not None and info.get("stopped_cleanly") is True else "broken"

    def sandboxes(self) -> dict[str, str]:
        registry = self._registry()
        return {name: KIT_STATES.get(self.state(name, registry), "error") for name in self._names(registry)}

    def nonce_places(self) -> Iterable[tuple[str, Path]]:
        for name in self._names(self._registry()):
            yield name, self._box_dir(name) / "data" / "home"

    def record_places(self) -> Iterable[tuple[str, Path]]:
        """Each box's /data: the directory Box Lite keeps (home and workspace are inside it)."""
        for name in self._names(self._registry()):
            yield name, self._box_dir(name) / "data"

    def credentials(self, sandbox_id: str) -> Collection[str]:
        return ()  # boxes are made on this machine with no account: no credential reaches them

    # -- disturbances behind the backend's back ------------------------------------------------------
    def _hermes_box(self, *args: str) -> None:
        """``hermes-box --home HOME ARGS`` as a user would run it; a failure says what it printed."""
        argv = [sys.executable, "-m", "reference.box_lite.cli", "--home", str(self.home), *args]
        env = {k: v for k, v in os.environ.items() if k != "HERMES_BOX_HOME"}
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, env=env, stdin=subprocess.DEVNULL
        )
        if done.returncode != 0:
            raise RuntimeError(f"hermes-box {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-400:]}")

    def pause(self, sandbox_id: str) -> None:
        self._hermes_box("stop", sandbox_id)

    def delete(self, sandbox_id: str) -> None:
        self._hermes_box("rm", sandbox_id, "--force")

    def fail(self, sandbox_id: str) -> None:
        """Break the box: its daemon dies without a stop (SIGKILL), taking every box process with it."""
        pid_file = self._pid_file(sandbox_id)
        pid = _held(pid_file)
        if not pid:
            raise RuntimeError(f"box {sandbox_id} has no running daemon to kill")
        try:
            if DAEMON_MODULE not in Path(f"/proc/{pid}/cmdline").read_bytes():
                raise RuntimeError(f"PID {pid} in {pid_file} is not a box daemon")
            os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass  # it exited meanwhile
        deadline = time.monotonic() + DAEMON_EXIT_S
        while _held(pid_file) is not None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the daemon of box {sandbox_id} (PID {pid}) did not die within {DAEMON_EXIT_S:g}s")
            time.sleep(0.02)

    # -- the run's end -------------------------------------------------------------------------
    def daemons(self) -> list[int]:
        """PIDs of the daemons still running under this home."""
        return [pid for name in self._names(self._registry()) if (pid := _held(self._pid_file(name)))]

    def stop_all(self) -> list[int]:
        """Stop every box under this home at once: SIGTERM to each daemon (a daemon stops its box
        cleanly on it), SIGKILL to one that is still there after a grace; the daemon PIDs left (none)."""
        pid_files = [self._pid_file(name) for name in self._names(self._registry())]
        for sig, grace in ((signal.SIGTERM, DAEMON_EXIT_S), (signal.SIGKILL, DAEMON_EXIT_S)):
            live = [(f, pid) for f in pid_files if (pid := _held(f))]
            for _, pid in live:
                with contextlib.suppress(OSError):
                    if DAEMON_MODULE in Path(f"/proc/{pid}/cmdline").read_bytes():
                        os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while any(_held(f) is not None for f, _ in live) and time.monotonic() < deadline:
                time.sleep(0.02)
        return self.daemons()
