"""The box's supervised workload, run by its daemon (``WORKLOAD`` in box.env).

``WORKLOAD=executor`` (``EXECUTOR_COMMAND``) or any command line, run as ``sh -c`` in
the box as its root, in ~/workspace, with the box user's environment plus
``WORKLOAD_PORT`` (where it must listen, on the box's loopback) and ``HERMES_BOX_TOKEN``
(the box's bearer token, for a workload that checks it itself).  Its stdout and stderr,
and one line per event of the supervisor, go to ``BOX_DIR/logs/workload.log`` (started
afresh past ``LOG_LIMIT``, the previous one kept as ``workload.log.1``), outside /data.

The supervisor:

- starts it with the box, unless it is paused;
- restarts it when it ends, after a backoff doubling from 1 s to ``BACKOFF_MAX_S``
  (back to 1 s once a run has lasted ``STEADY_S``);
- ``pause(persist=True)`` (``hb down``): ends it (SIGTERM to its whole tree, SIGKILL
  after ``STOP_GRACE_S``) and writes ``BOX_DIR/workload.paused``; the supervisor starts
  nothing while that file exists, across stops and starts of the box, until
  ``resume`` (``hb up``) removes it;
- ``hold``/``release``: the same pause, not recorded: ``save`` holds the workload while
  it archives /data (the daemon releases the hold when the saver's connection closes,
  even if the saver was killed); ``BOX_DIR/workload.held``, written by ``load`` before
  the box first starts, keeps it stopped until the restore is verified;
- records its state in ``BOX_DIR/workload.json`` at every change (state, pid,
  restarts, last exit, since), which ``status()`` returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reference.box_lite.paths import BoxDir
from reference.box_lite.records import json_bytes, publish_atomic, utc_now

EXECUTOR_COMMAND = 'exec executor web --port "$WORKLOAD_PORT"'
BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0
STEADY_S = 30.0
STOP_GRACE_S = 5.0
LOG_LIMIT = 1 << 20

Spawn = Callable[[list[str], dict[str, str], str, int], Any]  # (argv, env, cwd, log fd) -> a Popen
Signal = Callable[[int, int], int]  # (leader's host pid, signal) -> processes signalled


def command_line(workload: str) -> str:
    return EXECUTOR_COMMAND if workload.strip() == "executor" else workload


def paused_marker(box: BoxDir) -> Path:
    return box.root / "workload.paused"


def held_marker(box: BoxDir) -> Path:
    return box.root / "workload.held"


def log_path(box: BoxDir) -> Path:
    return box.root / "logs" / "workload.log"


class Supervisor:
    """One box's workload (see the module); every method is safe from any thread."""

    def __init__(self, box: BoxDir, workload: str, port: int, env: dict[str, str], spawn: Spawn, kill: Signal) -> None:
        self.box = box
        self.command = command_line(workload)
        self.port = port
        self.env = {**env, "WORKLOAD_PORT": str(port)}
        self._spawn = spawn
        self._kill = kill
        self._cond = threading.Condition()
        self._popen: Any = None
        self._holds = 0
        self._closing = False
        self._record: dict[str, Any] = {"state": "starting", "pid": None, "restarts": 0, "last_exit": None}
        self._thread = threading.Thread(target=self._run, name="workload", daemon=True)

    # -- what others ask ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {**self._record, "command": self.command, "port": self.port, "log": str(log_path(self.box))}

    def pause(self) -> dict[str, Any]:
        """``hb down``: end the workload and keep it ended, across restarts of the box, until ``resume``."""
        publish_atomic(paused_marker(self.box), f"paused at {utc_now()} (hb down; hb up resumes)\n".encode())
        self._event("paused (hb down)")
        self._end_current()
        self._set(state="paused", pid=None)
        return self.status()

    def resume(self) -> dict[str, Any]:
        """``hb up``: forget the pause (and a load's hold) and start the workload now."""
        for marker in (paused_marker(self.box), held_marker(self.box)):
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()
        self._event("resumed (hb up)")
        with self._cond:
            if not self._why_not() and self._popen is None:
                self._set(state="starting")
            self._cond.notify_all()
        return self.status()

    def hold(self) -> None:
        """Stop the workload for a while (a save), without recording a pause."""
        with self._cond:
            self._holds += 1
        self._end_current()

    def release(self) -> None:
        with self._cond:
            self._holds = max(0, self._holds - 1)
            self._cond.notify_all()

    def close(self) -> None:
        """The box is stopping: end the workload and the supervisor (its state says stopped)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._end_current()
        self._set(state="stopped", pid=None)

    # -- the loop -------------------------------------------------------------------------------
    def _why_not(self) -> str:
        """Why the workload must not run now ("" when it may)."""
        if self._closing:
            return "stopped"
        if paused_marker(self.box).exists():
            return "paused"
        if held_marker(self.box).exists():
            return "held"
        if self._holds:
            return "quiesced"
        return ""

    def _run(self) -> None:
        backoff = BACKOFF_START_S
        while True:
            with self._cond:
                while (why := self._why_not()) and not self._closing:
                    if self._record.get("state") != why:
                        self._set(state=why, pid=None)
                    self._cond.wait(1.0)
                if self._closing:
                    return
            started = time.monotonic()
            try:
                popen = self._launch()
            except Exception as exc:  # reported in the state and the log, then retried
                self._event(f"could not start: {exc}")
                self._set(state="backoff", pid=None, last_exit=f"not started: {exc}")
                code = None
            else:
                with self._cond:
                    self._popen = popen
                self._set(state="running", pid=popen.pid, since=utc_now())
                self._event(f"started (host pid {popen.pid}): {self.command}")
                code = popen.wait()
                with self._cond:
                    self._popen = None
            with self._cond:
                if self._why_not():
                    self._event(f"ended (exit {code}) for {self._why_not()}")
                    self._set(pid=None, last_exit=code)
                    continue
                if time.monotonic() - started >= STEADY_S:
                    backoff = BACKOFF_START_S
                restarts = int(self._record.get("restarts") or 0) + 1
                self._event(f"exited (exit {code}); restart {restarts} in {backoff:g} s")
                self._set(state="backoff", pid=None, last_exit=code, restarts=restarts)
                self._cond.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _launch(self) -> Any:
        path = log_path(self.box)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size > LOG_LIMIT:
                os.replace(path, path.with_name(path.name + ".1"))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            return self._spawn(["sh", "-c", self.command], self.env, self.env.get("HOME", "/"), fd)
        finally:
            os.close(fd)

    def _end_current(self) -> None:
        """SIGTERM the running workload's tree, SIGKILL after the grace; returns once it has ended."""
        with self._cond:
            popen = self._popen
        if popen is None:
            return
        self._kill(popen.pid, signal.SIGTERM)
        try:
            popen.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self._kill(popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=STOP_GRACE_S)

    def _set(self, **changes: Any) -> None:
        with self._cond:
            self._record.update(changes)
            record = dict(self._record, updated_at=utc_now())
        with contextlib.suppress(OSError):
            publish_atomic(self.box.root / "workload.json", json_bytes(record))

    def _event(self, text: str) -> None:
        path = log_path(self.box)
        with contextlib.suppress(OSError):
            path.parent.mkdir(mode=0o700, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(f"{utc_now()} [hermes-box] workload {text}\n")


def tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of ``path`` (read from its end, at most 1 MiB)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - LOG_LIMIT))
            data = fh.read()
    except OSError:
        return ""
    return b"\n".join(data.splitlines()[-lines:]).decode("utf-8", "replace")
