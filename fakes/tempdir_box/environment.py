"""TempdirBoxEnvironment: a BaseEnvironment whose sandbox is a temp directory.

Each command is ``bash -c`` (or ``bash -l -c``) started in its own session,
so a kill reaches the whole process group, with a clean environment: only
the box's HOME, TMPDIR, PATH and locale, never a host variable.  The box
behaves like a remote sandbox towards its state: paused boxes are resumed,
a deleted box is reported once and then replaced (environment_recreated),
and a box in the error state is reported and left alone.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import signal
import subprocess
import tarfile
import threading
from pathlib import Path
from typing import Any

from tools.environments.base import BaseEnvironment
from tools.environments.base_output import _ThreadedProcessHandle

from reference.common.finalize import CleanupOffThread

from .boxes import Box

logger = logging.getLogger("fakes.tempdir_box")

BOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MAX_TRACKED_GROUPS = 256


class TempdirBoxEnvironment(CleanupOffThread, BaseEnvironment):
    def __init__(
        self,
        *,
        box: Box,
        task_id: str,
        cwd: str,
        timeout: int,
        persistent: bool,
        owner: str | None,
        file_sync: bool = True,
    ):
        self._box = box
        self._sync: Any = None
        self._task_id = task_id
        self._owner = owner
        self._persistent = persistent
        self._lock = threading.RLock()
        self._groups: list[subprocess.Popen] = []  # leaders of the groups this environment started
        self._closed = False
        self._report_gone = False
        self._ensure_box(first=True)
        super().__init__(cwd=cwd, timeout=timeout)
        self._sync = self._make_sync() if file_sync else None
        if self._sync is not None:
            self._sync.sync(force=True)
        self.init_session()

    # -- box state ---------------------------------------------------------------
    def _ensure_box(self, *, first: bool = False) -> None:
        state = self._box.state()
        if state == "deleted":
            self._box.create(task_id=self._task_id, persistent=self._persistent, owner=self._owner)
            logger.info("created tempdir box %s for task %s", self._box.id, self._task_id)
        elif first and self._owner and self._box.meta().get("owner") not in (None, self._owner):
            raise PermissionError(f"box {self._box.id} belongs to another TEMPDIR_BOX_TOKEN")
        elif state == "paused":
            self._box.write_meta(state="running")

    def _before_execute(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"tempdir box {self._box.id} was cleaned up; create a new environment")
            if self._report_gone:
                # The previous command reported the loss; this one runs in a new box.
                self._report_gone = False
                self._box.create(task_id=self._task_id, persistent=self._persistent, owner=self._owner)
                mark = getattr(self, "_mark_recreated", None)
                if callable(mark):
                    mark()
                if self._sync is not None:
                    self._sync = self._make_sync()
                    self._sync.sync(force=True)
                self._snapshot_ready = False
                self.init_session()
                return
            if self._box.state() == "paused":
                self._box.write_meta(state="running")
                logger.info("tempdir box %s was paused; resumed it", self._box.id)
        if self._sync is not None:
            self._sync.sync()

    def _refusal(self) -> str | None:
        """Why a command cannot run now, or None."""
        state = self._box.state()
        if state == "deleted":
            with self._lock:
                self._report_gone = True
            return (
                f"tempdir box {self._box.id} no longer exists (deleted outside Hermes); "
                "the command did not run. The next command runs in a new box."
            )
        if state == "error":
            return (
                f"tempdir box {self._box.id} is in the error state; the command did not run "
                "and the box was not replaced. Inspect it, then delete it to start over."
            )
        return None

    # -- commands ----------------------------------------------------------------
    def get_temp_dir(self) -> str:
        return str(self._box.tmp)

    def _box_env(self) -> dict[str, str]:
        return {
            "HOME": str(self._box.home),
            "USER": "boxuser",
            "LOGNAME": "boxuser",
            "SHELL": "/bin/bash",
            "PATH": BOX_PATH,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TMPDIR": str(self._box.tmp),
            "TERM": "dumb",
        }

    def _run_bash(
        self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
    ) -> Any:
        refusal = self._refusal()
        if refusal is not None:
            return _ThreadedProcessHandle(lambda: (refusal, 1))
        args = ["bash", "-l", "-c", cmd_string] if login else ["bash", "-c", cmd_string]
        proc = subprocess.Popen(
            args,
            cwd=self._box.home,
            env=self._box_env(),
            start_new_session=True,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            encoding="utf-8",
            errors="replace",
        )
        self._track(proc)
        if stdin_data is not None:
            proc._hermes_stdin_thread = self._feed(proc, stdin_data)  # type: ignore[attr-defined]
        return proc

    @staticmethod
    def _feed(proc: subprocess.Popen, data: str) -> threading.Thread:
        """Stream stdin_data, then close it; bytes carried as surrogateescape survive.

        Errors go to ``proc._hermes_stdin_errors``, where the host reports them.
        A reader that stops early (``head -c N``) is not an error.
        """
        errors: list[BaseException] = []
        proc._hermes_stdin_errors = errors  # type: ignore[attr-defined]

        def write() -> None:
            stdin = proc.stdin  # text mode (_run_bash), so a TextIOWrapper over the byte pipe
            pipe = stdin.buffer if isinstance(stdin, io.TextIOWrapper) else None
            try:
                payload = data.encode("utf-8", "surrogateescape")
                if pipe is not None:
                    pipe.write(payload)
            except UnicodeEncodeError as exc:
                errors.append(exc)
            except OSError:
                pass
            finally:
                try:
                    if pipe is not None:
                        pipe.close()
                except OSError:
                    pass

        thread = threading.Thread(target=write, daemon=True, name="tempdir-box-stdin")
        thread.start()
        return thread

    def _track(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._groups.append(proc)
            if len(self._groups) > _MAX_TRACKED_GROUPS:
                self._groups = [p for p in self._groups if _group_alive(p)]

    def _kill_process(self, proc: Any) -> None:
        if isinstance(proc, subprocess.Popen):
            _kill_group(proc)
        try:
            proc.kill()
        except (ProcessLookupError, PermissionError, OSError):
            pass

    # -- file sync -----------------------------------------------------------------
    def _make_sync(self) -> Any:
        from tools.environments.file_sync import FileSyncManager, iter_sync_files

        base = f"{self._box.home}/.hermes"
        return FileSyncManager(
            get_files_fn=lambda: iter_sync_files(container_base=base),
            upload_fn=self._upload,
            delete_fn=self._delete,
            bulk_download_fn=self._download,
        )

    @staticmethod
    def _upload(host_path: str, remote_path: str) -> None:
        Path(remote_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(host_path, remote_path)

    @staticmethod
    def _delete(remote_paths: list[str]) -> None:
        for path in remote_paths:
            Path(path).unlink(missing_ok=True)

    def _download(self, dest: Path) -> None:
        base = self._box.home / ".hermes"
        with tarfile.open(dest, "w") as tar:
            if base.is_dir():
                tar.add(base, arcname=str(base).lstrip("/"))

    # -- teardown ------------------------------------------------------------------
    def cleanup(self, force_remove: bool = False) -> None:
        """Persistent: pause the box.  Otherwise, or with ``force_remove`` (the prompt probe,
        a user's teardown): delete it."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            groups, self._groups = self._groups, []
        for leader in groups:
            _kill_group(leader)
        if self._sync is not None and self._box.exists():
            self._sync.sync_back()
        if not self._box.exists():
            return  # already gone: counts as deleted
        if self._persistent and not force_remove:
            if self._box.state() == "running":
                self._box.write_meta(state="paused")
                logger.info("paused tempdir box %s", self._box.id)
        else:
            self._box.delete()  # only the box this environment created, by its own path
            logger.info("deleted tempdir box %s", self._box.id)

    def wait_for_cleanup(self, timeout: float = 15.0) -> None:
        """cleanup() is synchronous here; make sure it ran (the host's atexit path)."""
        self.cleanup()


def _owns_group(leader: subprocess.Popen) -> bool:
    """Whether group ``leader.pid`` can still be the one this environment started.

    An environment lives for many commands and pids are recycled (pid_max is
    often 32768), so once the leader is reaped and its group has emptied, the
    number may name another command's group.  The kernel keeps a pid free
    while a group of that id has members, so after the reaping a live process
    with that pid is a newcomer; without one, any members are the leader's
    orphans (detached jobs).
    """
    if leader.returncode is None:
        return True  # not reaped yet: the pid is still held
    try:
        os.kill(leader.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _group_alive(leader: subprocess.Popen) -> bool:
    if not _owns_group(leader):
        return False
    try:
        os.killpg(leader.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _kill_group(leader: subprocess.Popen) -> None:
    if not _owns_group(leader):
        return
    try:
        os.killpg(leader.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass
