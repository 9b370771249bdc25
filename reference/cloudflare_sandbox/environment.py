"""CloudflareSandboxEnvironment: Hermes's BaseEnvironment over the bridge Worker.

Construction negotiates extensions, initialises the workspace (no compute
yet) and runs Hermes's session bootstrap, which starts or restores the
container.  Each command is a RemoteCommand streaming into a
StreamProcessHandle; Hermes's own wait loop applies timeouts and interrupts
and calls ``kill``, which cancels the command in the Worker.  Cleanup cancels
what still runs, then releases the workspace: persistent workspaces are
snapshotted and stopped (the next command restores them), ephemeral ones are
destroyed; afterwards the environment refuses new commands.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from tools.environments.base import BaseEnvironment

from reference.common.cwd import HermesDefaultCwd
from reference.common.finalize import CleanupOffThread
from reference.common.passthrough import PassthroughEnvironment
from reference.common.stdin import encode_stdin, report_stdin_error
from reference.common.stream_handle import StreamProcessHandle

from .command import RemoteCommand
from .errors import PREFIX
from .settings import STRIP_KEYS, Settings
from .workspace import Workspace

logger = logging.getLogger("reference.cloudflare_sandbox")
CLEANUP_DEADLINE_S = 12.0  # inside Hermes's 15 s atexit wait


class CloudflareSandboxEnvironment(HermesDefaultCwd, PassthroughEnvironment, CleanupOffThread, BaseEnvironment):
    passthrough_blocked = STRIP_KEYS
    _stdin_mode = "pipe"
    _snapshot_timeout = 120  # the bootstrap carries the container's cold start or restore

    def __init__(
        self,
        *,
        settings: Settings,
        workspace_id: str,
        task_id: str,
        cwd: str,
        timeout: int,
        persistent: bool,
        probe: bool = False,
    ):
        self._settings = settings
        self._task_id = task_id
        self._lock = threading.Lock()
        self._closed = False
        self._commands: set[RemoteCommand] = set()
        # Persistent: the host keeps it across turns.  Ephemeral: one workspace for the whole
        # session, released when the session ends.  The prompt probe is torn down by its caller.
        self._persistent = persistent
        self._session_scoped = not persistent and not probe
        workspace = Workspace(settings, workspace_id, persistent=persistent)
        workspace.open()
        self._workspace = workspace
        super().__init__(cwd=cwd, timeout=timeout)
        self.init_session()

    @property
    def workspace_id(self) -> str:
        return self._workspace.id

    @property
    def extensions(self) -> list[str]:
        return self._workspace.features.names

    def get_temp_dir(self) -> str:
        return "/tmp"

    # -- commands ----------------------------------------------------------------------
    def _run_bash(
        self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
    ) -> Any:
        handle = StreamProcessHandle()
        _, stdin_failed = encode_stdin(stdin_data)
        if stdin_failed is not None:  # no byte form: send none and report it, as Hermes's own writer does
            report_stdin_error(handle, stdin_failed)
            stdin_data = ""
        with self._lock:
            closed = self._closed
            if not closed:
                command = RemoteCommand(
                    self._workspace,
                    cmd_string,
                    stdin_data,
                    login=login,
                    timeout=timeout,
                    handle=handle,
                    tmp=self.get_temp_dir(),
                    on_recreated=self._recreated,
                    on_done=self._forget,
                )
                self._commands.add(command)
        if closed:
            handle.feed(f"[{PREFIX}: this environment was cleaned up; the command did not run]\n".encode())
            handle.finish(1)
            return handle
        handle.set_stop(command.stop)
        command.start()
        return handle

    def _forget(self, command: RemoteCommand) -> None:
        with self._lock:
            self._commands.discard(command)

    def _recreated(self) -> None:
        mark = getattr(self, "_mark_recreated", None)  # hosts without it simply do not flag the result
        if callable(mark):
            mark()

    # -- teardown ----------------------------------------------------------------------
    def cleanup(self, force_remove: bool = False) -> None:
        with self._lock:
            if self._closed or not hasattr(self, "_workspace"):
                return
            self._closed = True
            running = list(self._commands)
        for command in running:
            command.handle.kill()
        try:
            self._workspace.finish(delete=force_remove, deadline=time.monotonic() + CLEANUP_DEADLINE_S)
        finally:
            self._workspace.close()

    def wait_for_cleanup(self, timeout: float = 15.0) -> None:
        worker = threading.Thread(target=self.cleanup, daemon=True, name="cf-cleanup")
        worker.start()
        worker.join(max(0.0, timeout))
        if worker.is_alive():
            logger.warning(
                "%s: cleanup of workspace %s is still running after %.0fs", PREFIX, self._workspace.id, timeout
            )
