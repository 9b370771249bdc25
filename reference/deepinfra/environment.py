"""DeepInfraEnvironment: Hermes's BaseEnvironment running commands in a DeepInfra sandbox.

Lifecycle: persistent mode (the default) reattaches this session's stopped
sandbox for the task when exactly one exists, else creates one; cleanup()
stops it (the idle reaper's call: /workspace is kept, compute released) and
the next environment for the task resumes it.  Non-persistent mode creates a
sandbox and terminates it on cleanup().  Every sandbox is terminated at the
end of the session: wait_for_cleanup() (the host's exit path),
cleanup(force_remove=True), and an exit hook for stopped leftovers.

No call is spent on the sandbox's state before a command: the exec's own
answer tells.  A refusal before anything ran (404: terminated outside Hermes;
409: not running) is recovered from and the command sent once more: a
stopped sandbox is resumed; a terminated one is replaced and the result says
``environment_recreated``; a failed one is reported and left alone.  File
sync's calls recover the same way.  $HOME and the default cwd are
/workspace, the only directory that survives a stop.

Recovery runs on whichever thread met the refusal (a command's stream thread,
or the caller's during file sync), under the environment's lock; the calls a
recovery makes itself (the new sandbox's bootstrap and first sync) are not
recovered again.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from tools.environments.base import BaseEnvironment

from reference.common.cwd import HermesDefaultCwd, initial
from reference.common.finalize import CleanupOffThread
from reference.common.overlap import alongside
from reference.common.passthrough import PassthroughEnvironment
from reference.common.stdin import encode_stdin, report_stdin_error
from reference.deepinfra import launcher
from reference.deepinfra.files import Carried, SandboxFiles
from reference.deepinfra.sandboxes import (
    Account,
    CommandRefused,
    SandboxBroken,
    SandboxGone,
    disown,
    own,
    refused_by_state,
)
from reference.deepinfra.settings import HERMES_DIR, MAX_COMMAND_S, TEMP_DIR, WORKSPACE, Settings
from reference.deepinfra.settings import KEY_VAR as _KEY_VAR
from reference.deepinfra.streaming import CommandRun

logger = logging.getLogger("reference.deepinfra")


class DeepInfraEnvironment(HermesDefaultCwd, PassthroughEnvironment, CleanupOffThread, BaseEnvironment):
    passthrough_blocked = frozenset({_KEY_VAR})
    # stdin comes as bytes to _run_bash; the launcher delivers it exactly (see launcher.py).
    _stdin_mode = "pipe"

    def __init__(self, *, account: Account, settings: Settings, task_id: str, cwd: str, timeout: int):
        self._account = account
        self._settings = settings
        self._task_id = task_id
        self._lock = threading.RLock()  # the sandbox handle: replacement, resume, release
        self._closed = False
        self._terminated = False
        self._sync: Any = None
        self._preparing = False  # a sandbox's first sync and bootstrap are running: nothing recovers
        self._carry: Carried | None = None  # the bootstrap's way to carry the first sync's archive
        self._persistent = settings.persistent
        # A non-persistent sandbox still lasts the whole session: no teardown after each turn.
        self._session_scoped = not settings.persistent
        self._files = SandboxFiles(lambda: self._sandbox, self._recover_files)
        self._sandbox = self._acquire()
        try:
            super().__init__(cwd=initial(cwd, WORKSPACE), timeout=timeout)
            self._prepare()
        except BaseException:
            self._release(terminate=not settings.persistent)
            raise

    # -- the sandbox ------------------------------------------------------------------------
    @property
    def sandbox_id(self) -> str:
        return str(self._sandbox.id)

    def get_temp_dir(self) -> str:
        return TEMP_DIR  # under /workspace: the session snapshot survives a stop

    def _acquire(self) -> Any:
        if self._settings.persistent:
            found = self._account.reattach(self._task_id)
            if found is not None:
                return found
        return self._account.create(self._task_id, self._settings.plan)

    def _prepare(self) -> None:
        """Hermes's files and the session snapshot, in one exec: file sync gathers the files beside the
        bootstrap and hands its archive to the bootstrap's exec, which unpacks it while the bootstrap
        runs (files.Carried; an archive too big to carry goes up on its own, beside the bootstrap).
        Both are done before the first command.  Every command's launcher makes the directories the
        backend relies on, so no exec is spent on them."""
        carry = self._files.carry = self._carry = Carried()

        def sync() -> None:
            try:
                self._start_sync()
            finally:
                carry.close()

        self._preparing = True
        try:
            alongside(sync, self.init_session, name="deepinfra-first-sync")
        finally:
            self._preparing = False
            self._carry = self._files.carry = None

    def _start_sync(self) -> None:
        from tools.environments.file_sync import FileSyncManager, iter_sync_files

        self._sync = FileSyncManager(
            get_files_fn=lambda: iter_sync_files(container_base=HERMES_DIR),
            upload_fn=self._files.upload,
            delete_fn=self._files.delete,
            bulk_upload_fn=self._files.upload_many,
            bulk_download_fn=self._files.download,
        )
        self._sync.sync(force=True)

    # -- before each command ------------------------------------------------------------------
    def _before_execute(self) -> None:
        with self._lock:
            if self._terminated:
                raise RuntimeError(f"the DeepInfra environment for task {self._task_id} was terminated")
            self._closed = False  # a persistent environment used after cleanup() resumes its sandbox
        if self._sync is not None:
            self._sync.sync()

    # -- a call the service refused -------------------------------------------------------------
    def _recover(self, answer: BaseException, sandbox_id: str) -> Any:
        """The sandbox to send a refused call to again: this one resumed, or a new one when it is gone
        (or the one another thread already brought).  CommandRefused when nothing may run: the sandbox
        is in the failed state, or the environment was terminated."""
        import deepinfra

        with self._lock:
            if self._terminated:
                raise CommandRefused(
                    f"deepinfra: the environment for task {self._task_id} was terminated; the command did not run"
                )
            if sandbox_id != self.sandbox_id:
                return self._sandbox
            try:
                if isinstance(answer, deepinfra.NotFoundError):
                    raise SandboxGone(sandbox_id)
                self._account.ensure_running(self._sandbox)
            except SandboxGone:
                self._replace()
            except SandboxBroken:
                raise CommandRefused(
                    f"deepinfra: sandbox {sandbox_id} is in the failed state (a sandbox error); the command did "
                    "not run and the sandbox was not replaced, so nothing is lost silently. Terminate it in "
                    "the DeepInfra dashboard to start over."
                ) from None
            return self._sandbox

    def _recover_files(self, answer: BaseException, sandbox_id: str) -> Any:
        """Recovery for file sync's calls; a sandbox's own first sync is not recovered (its recovery is
        what is running)."""
        if self._preparing or not refused_by_state(answer, exec_call=False):
            raise answer
        return self._recover(answer, sandbox_id)

    def _replace(self) -> None:
        """The sandbox was terminated outside Hermes: this command runs in a new one."""
        old = self.sandbox_id
        disown(old)
        self._sandbox = self._account.create(self._task_id, self._settings.plan)
        logger.info("sandbox %s was terminated outside Hermes; replaced by %s", old, self.sandbox_id)
        mark = getattr(self, "_mark_recreated", None)
        if callable(mark):
            mark()
        self._snapshot_ready = False
        self._prepare()

    # -- commands ----------------------------------------------------------------------------
    def _run_bash(
        self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
    ) -> Any:
        if timeout > MAX_COMMAND_S:
            logger.warning("DeepInfra stops every command after 30 minutes; this one asks for %ss", timeout)
        stdin, stdin_failed = encode_stdin(stdin_data)
        carry, files = self._carry, None
        if carry is not None and login and stdin is None:
            self._carry = None  # the bootstrap's exec, the only one that carries
            files = carry.take()
        launch = launcher.launch(cmd_string, login=login, stdin=stdin, files=files)
        recover = None if self._preparing else self._recover
        landed = None if files is None or carry is None else _reporting_to(carry)
        run = CommandRun(self._account, self._sandbox, launch, timeout, recover, landed)
        return report_stdin_error(run.start(), stdin_failed)

    # -- teardown ----------------------------------------------------------------------------
    def cleanup(self, force_remove: bool = False) -> None:
        """Persistent: sync back and stop (the sandbox is resumed later).  Otherwise, or with
        ``force_remove``: sync back and terminate."""
        with self._lock:
            if self._terminated or not hasattr(self, "_sandbox"):
                return
            if self._closed and not force_remove and self._settings.persistent:
                return
            self._closed = True
            try:
                state = self._account.state(self._sandbox)
            except Exception:
                state = "unknown"
            if state == "deleted":
                self._terminated = True
                disown(self.sandbox_id)
                return  # already gone: counts as terminated
            if self._sync is not None and state == "running":
                self._sync.sync_back()
            self._release(terminate=force_remove or not self._settings.persistent, state=state)

    def _release(self, *, terminate: bool, state: str = "unknown") -> None:
        sandbox_id = self.sandbox_id
        if terminate:
            if self._account.terminate_id(sandbox_id):
                self._terminated = True
            else:
                self._closed = False  # kept: a later cleanup may try again
            return
        if state in ("running", "starting", "creating", "unknown"):
            self._account.stop(self._sandbox)
        own(self._account, sandbox_id)  # still ours until the session ends or it is resumed

    def wait_for_cleanup(self, timeout: float = 15.0) -> None:
        """The host's exit path: the session ends, so the sandbox is terminated (within ``timeout``)."""
        if getattr(self, "_terminated", True):
            return
        worker = threading.Thread(
            target=self.cleanup, kwargs={"force_remove": True}, daemon=True, name="deepinfra-terminate"
        )
        worker.start()
        worker.join(max(0.0, timeout - 0.5))


def _reporting_to(carry: Carried) -> Any:
    """What the bootstrap's exec tells the first sync when it ends: the files landed unless the service
    failed the call or the launcher could not unpack them."""

    def landed(code: int, note: str | None) -> None:
        if note is None and code != launcher.LAUNCH_FAILED:
            carry.landed(None)
        else:
            carry.landed(RuntimeError(f"the session bootstrap that carried Hermes's files failed ({code}): {note}"))

    return landed
