"""BoxLiteEnvironment: Hermes's BaseEnvironment running commands in a Box Lite box.

Which box: a configured box (HERMES_BOX_NAME) is used as is, by every task,
and is never stopped or removed by Hermes; otherwise each task gets a box of
its own, named after the task id.  A persistent task box is stopped at
cleanup (its /data, home included, is kept) and started again by the next
environment of the task; a non-persistent one (a random suffix) is removed
at cleanup, and ``cleanup(force_remove=True)`` removes a persistent task box.

Every command is ``bash -c`` started by the box's daemon (BoxManager.popen)
in a process group of its own inside the box, so a kill reaches the whole
tree there.  A box stopped behind Hermes's back is started again and the
command runs; a removed one is reported by the command that finds it (which
does not run) and the next command runs in a new box with
``environment_recreated``; a broken box (its daemon ended without a stop) is
reported and left alone for ``hermes-box doctor``.  Hermes files are pushed
and pulled back as tar archives through commands in the box, so every path
is resolved inside the box, never through a link on this machine.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import threading
from pathlib import Path
from typing import Any, Protocol

from tools.environments.base import BaseEnvironment
from tools.environments.base_output import _ThreadedProcessHandle

from reference.common import tar_transfer
from reference.common.cwd import HermesDefaultCwd
from reference.common.errors import ConnectionErrors
from reference.common.finalize import CleanupOffThread
from reference.common.naming import sandbox_name
from reference.common.passthrough import PassthroughEnvironment
from reference.common.plugin import PROBE_TASK_ID
from reference.common.retry import RATE_LIMITED_ATTEMPTS, retry
from reference.common.stdin import encode_stdin, report_stdin_error

logger = logging.getLogger("reference.box_lite")

PREFIX = "hermes"
HOME = "/home/agent"
HERMES_DIR = f"{HOME}/.hermes"
TRANSFER_TIMEOUT_S = 300.0
_MAX_TRACKED = 256

connection_error = ConnectionErrors("box_lite", "run `hermes-box ls` and `hermes-box doctor NAME` to see the box")

# One process-wide lock per box name: two environments of this process never start, stop or
# remove the same box at once (other processes are kept apart by the box manager's own lock).
_NAMES_LOCK = threading.Lock()
_NAME_LOCKS: dict[str, threading.Lock] = {}


class Settings(Protocol):
    """What an environment is made with (the provider's BoxSettings)."""

    @property
    def box(self) -> str | None: ...  # a configured box, used as is; None: one box per task

    @property
    def persistent(self) -> bool: ...

    @property
    def network(self) -> bool | None: ...  # None: box.env's NETWORK


def _name_lock(name: str) -> threading.Lock:
    with _NAMES_LOCK:
        return _NAME_LOCKS.setdefault(name, threading.Lock())


def _patiently(action: Any, name: str, **kwargs: Any) -> Any:
    """``action(name, **kwargs)``; while another process holds the box's lock (a ``hermes-box save``, say)
    the call was refused before it did anything, so it is asked again on the common budget for refusals
    (reference.common.retry); then the BoxLocked naming the holder."""
    from reference.box_lite.errors import BoxLocked

    return retry(
        lambda: action(name, **kwargs),
        attempts=RATE_LIMITED_ATTEMPTS,
        retryable=lambda exc: isinstance(exc, BoxLocked),
    )


def _not_started(why: str) -> _ThreadedProcessHandle:
    """What Hermes waits on for a command that never started: ``why`` as its output, exit status 1."""
    return _ThreadedProcessHandle(lambda: (why, 1))


def _feed(proc: Any, payload: bytes) -> threading.Thread:
    """Stream ``payload`` into the command's stdin and close it (its EOF); a reader that stops early is fine."""

    def write() -> None:
        with contextlib.suppress(OSError), proc.stdin as pipe:
            pipe.write(payload)

    thread = threading.Thread(target=write, daemon=True, name="box-lite-stdin")
    thread.start()
    return thread


class BoxLiteEnvironment(HermesDefaultCwd, PassthroughEnvironment, CleanupOffThread, BaseEnvironment):
    def __init__(
        self,
        *,
        manager: Any,
        settings: Settings,
        task_id: str,
        cwd: str,
        timeout: int,
        blocked: frozenset[str] = frozenset(),
    ):
        self._manager, self._settings, self._task_id = manager, settings, task_id
        self.passthrough_blocked = blocked  # never forwarded into the box, whatever the passthrough list says
        self._owned = settings.box is None  # a configured box belongs to the user
        # The prompt-time probe never keeps or reuses a task box.
        self._persistent = settings.persistent and not (self._owned and task_id == PROBE_TASK_ID)
        # A non-persistent box lasts the whole session: no teardown after each turn.
        self._session_scoped = not self._persistent
        self._box = settings.box or self._task_box_name()
        self._commands: list[Any] = []  # what cleanup ends
        self._sync: Any = None
        self._closed = self._replace_next = False
        self._lock = threading.RLock()
        self._acquire()
        super().__init__(cwd=cwd, timeout=timeout)
        self._start_sync()
        self.init_session()

    @property
    def box_name(self) -> str:
        return self._box

    def _task_box_name(self) -> str:
        return sandbox_name(PREFIX, self._task_id, unique=not self._persistent)

    # -- the box -------------------------------------------------------------------------
    def _acquire(self) -> None:
        """Make the box usable: create it when missing, start it when stopped, refuse a broken one."""
        from reference.box_lite.errors import BoxExists

        with _name_lock(self._box):
            for _ in range(2):
                state = self._state()
                if state == "running":
                    return
                if state == "stopped":
                    logger.info("starting stopped box %s for task %s", self._box, self._task_id)
                    self._call("starting", self._manager.start)
                    return
                if state in ("broken", "incomplete"):  # incomplete: its creation was interrupted
                    raise connection_error(self._broken_text("it was not replaced, so nothing in it is lost", state))
                try:
                    _patiently(self._manager.create, self._box, network=self._settings.network)
                except BoxExists:
                    continue  # another process made it just now: use that one
                except Exception as exc:
                    raise connection_error(f"creating box {self._box} failed", exc) from None
                logger.info("created box %s for task %s", self._box, self._task_id)
                return
        raise connection_error(f"box {self._box} could not be created or found")

    def _state(self) -> str | None:
        try:
            state: str | None = self._manager.state(self._box)
        except Exception as exc:
            raise connection_error(f"reading the state of box {self._box} failed", exc) from None
        return state

    def _call(self, what: str, action: Any) -> None:
        try:
            _patiently(action, self._box)
        except Exception as exc:
            raise connection_error(f"{what} box {self._box} failed", exc) from None

    def _broken_text(self, consequence: str, state: str = "broken") -> str:
        if state == "incomplete":
            return (
                f"box {self._box} is incomplete (its creation was interrupted, so its /data may be partial); "
                f"{consequence}. Remove it with `hermes-box rm {self._box} --force` (the next task creates a new "
                "one), or load its archive again"
            )
        return (
            f"box {self._box} is broken (the error state: its daemon ended without a stop, or its files and the "
            f"registry disagree); {consequence}. See `hermes-box doctor {self._box}`, then start it again with "
            f"`hermes-box start {self._box}` (its /data is kept), or remove it with `hermes-box rm {self._box}`"
        )

    # -- file sync -----------------------------------------------------------------------
    def _start_sync(self) -> None:
        """Hermes's skills, cache and credential files under ~/.hermes in the box, through tar in the box."""
        from tools.environments import file_sync

        self._sync = file_sync.FileSyncManager(
            bulk_upload_fn=self._upload,
            bulk_download_fn=self._download,
            delete_fn=self._delete_files,
            upload_fn=self._upload_one,
            get_files_fn=self._sync_files,
        )
        self._sync.sync(force=True)

    @staticmethod
    def _sync_files() -> Any:
        from tools.environments.file_sync import iter_sync_files

        return iter_sync_files(container_base=HERMES_DIR)

    def _capture(self, argv: list[str], stdin_data: bytes | None = None) -> tuple[bytes, int]:
        """Run ``argv`` in the box to completion: (stdout and stderr, exit code)."""
        proc = self._manager.popen(
            self._box,
            argv,
            env=self._box_env(),
            cwd="/",
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        try:
            out, _ = proc.communicate(stdin_data, timeout=TRANSFER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        return out or b"", proc.returncode

    def _checked(self, what: str, argv: list[str], stdin_data: bytes | None = None) -> bytes:
        out, code = self._capture(argv, stdin_data)
        if code != 0:
            raise RuntimeError(f"{what} in box {self._box} failed (exit {code}): {out[-300:]!r}")
        return out

    def _upload(self, pairs: list[tuple[str, str]]) -> None:
        archive = tar_transfer.pack(pairs)
        self._checked("unpacking Hermes's files", ["tar", "-x", "-f", "-", "--no-same-owner", "-C", "/"], archive)

    def _upload_one(self, host_path: str, remote_path: str) -> None:
        self._upload([(host_path, remote_path)])

    def _delete_files(self, remote_paths: list[str]) -> None:
        self._checked("deleting synced files", ["rm", "-f", "--", *remote_paths])

    def _download(self, dest: Path) -> None:
        # Members are the absolute paths without their "/", as Hermes's sync-back maps them.
        script = 'cd / && [ -d "$1" ] || exit 0; exec tar -c -f - --exclude="*.sock" -- "$1"'
        Path(dest).write_bytes(self._checked("packing Hermes's files", ["sh", "-c", script, "sh", HERMES_DIR[1:]]))

    # -- commands ------------------------------------------------------------------------
    @staticmethod
    def _box_env() -> dict[str, str]:
        """Added to the box user's own environment (USER, HOME, PATH, LANG, TMPDIR: the box manager's)."""
        return {"SHELL": "/bin/bash", "TERM": "dumb"}

    def _before_execute(self) -> None:
        """Refuse after cleanup; replace a box found removed (its replacement gets every file);
        otherwise send Hermes's changed files."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the box_lite environment for task {self._task_id} was cleaned up")
            replacing = self._replace_next
            if replacing:
                self._replace()
        if not replacing and self._sync is not None:
            self._sync.sync()

    def _replace(self) -> None:
        """The previous command found the box removed: this command gets a new one."""
        self._replace_next = False
        gone = self._box
        if self._owned and not self._persistent:
            self._box = self._task_box_name()
        self._acquire()
        logger.info("box %s was removed outside Hermes; this environment goes on in box %s", gone, self._box)
        self._recreated()

    def _recreated(self) -> None:
        """A new box: Hermes tells the model so, and the box gets Hermes's files and a new session snapshot."""
        if callable(getattr(self, "_mark_recreated", None)):  # a host feature: absent on older hosts
            self._mark_recreated()
        self._snapshot_ready = False  # the snapshot was in the old box's /tmp
        self._start_sync()
        self.init_session()

    def _spawn(self, argv: list[str], payload: bytes | None) -> Any:
        proc = self._manager.popen(
            self._box,
            argv,
            env=self._box_env(),
            cwd=HOME,
            stdin=subprocess.DEVNULL if payload is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self._track(proc)
        if payload is not None:
            proc._hermes_stdin_thread = _feed(proc, payload)
        return proc

    def _run_bash(
        self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
    ) -> Any:
        payload, stdin_failed = encode_stdin(stdin_data)
        argv = ["bash", *(["-l"] if login else []), "-c", cmd_string]
        try:
            proc = self._spawn(argv, payload)
        except Exception as exc:
            why = self._why_not_started(exc)
            if why is not None:
                return _not_started(why)
            try:
                proc = self._spawn(argv, payload)  # in the box that was stopped and is running again
            except Exception as again:
                return _not_started(f"box_lite: box {self._box} started again but did not run the command: {again}")
        return report_stdin_error(proc, stdin_failed)

    def _why_not_started(self, exc: BaseException) -> str | None:
        """Why a command did not start; None when the box was stopped and is started again.

        Never raises: Hermes runs a command again when execute() raises.
        """
        try:
            state = self._manager.state(self._box)
        except Exception as state_exc:
            return f"box_lite: box {self._box} did not run the command ({exc}); its state cannot be read ({state_exc})"
        if state == "stopped":
            logger.info("box %s was stopped outside Hermes; starting it again", self._box)
            try:
                with _name_lock(self._box):
                    if self._manager.state(self._box) == "stopped":
                        _patiently(self._manager.start, self._box)
            except Exception as start_exc:
                return f"box_lite: box {self._box} is stopped and did not start again: {start_exc}"
            return None
        if state is None:
            with self._lock:
                self._replace_next = True
            return (
                f"box_lite: box {self._box} no longer exists (removed outside Hermes); the command did not run. "
                "The next command runs in a new box."
            )
        if state in ("broken", "incomplete"):
            return "box_lite: " + self._broken_text("the command did not run and the box was not replaced", state)
        return f"box_lite: box {self._box} is {state} but did not start the command: {exc}"

    def _track(self, proc: Any) -> None:
        """Remember a command so cleanup ends it (finished ones are let go now and then)."""
        with self._lock:
            if len(self._commands) >= _MAX_TRACKED:
                self._commands = [p for p in self._commands if p.poll() is None]
            self._commands.append(proc)

    # -- teardown ------------------------------------------------------------------------
    def cleanup(self, force_remove: bool = False) -> None:
        """Persistent task box: stop it (its /data is kept); otherwise, or with ``force_remove``
        (the prompt probe, a user's teardown): remove it.  A configured box is left running as is:
        only this environment's commands end."""
        with self._lock:
            if self._closed or not hasattr(self, "_box"):
                return
            self._closed = True
            running, self._commands = [p for p in self._commands if p.poll() is None], []
        for proc in running:
            with contextlib.suppress(Exception):
                proc.kill()
        try:
            state = self._manager.state(self._box)
        except Exception:
            state = "unknown"
        if state is None:
            return  # removed already: nothing left to release
        if state == "running" and self._sync is not None:
            self._sync.sync_back()
        if self._owned:
            self._release(state, remove=force_remove or not self._persistent)

    def _release(self, state: str, *, remove: bool) -> None:
        """Remove this environment's task box (by its own name), or stop it; a failure is logged and
        leaves the environment open, so a later cleanup tries again."""
        action = self._manager.remove if remove else self._manager.stop if state == "running" else None
        if action is None:
            return
        try:
            with _name_lock(self._box):
                _patiently(action, self._box)
        except Exception as exc:
            logger.warning("box_lite: releasing box %s failed; a later cleanup tries again: %s", self._box, exc)
            with self._lock:
                self._closed = False

    def wait_for_cleanup(self, timeout: float = 15.0) -> None:
        self.cleanup()
