"""UpstashBoxEnvironment: Hermes's BaseEnvironment running commands in an Upstash Box.

Persistent mode keeps one Box per task (named after the task id), resumes it
when found paused and pauses it on cleanup.  Per-session mode creates a Box
with a random suffix and deletes exactly that Box on cleanup.  A Box paused
behind Hermes's back is resumed once; a deleted one is reported by the command
that finds it (which does not run), and the next command runs in a new Box
with ``environment_recreated``; a Box in the error state is reported and left
alone.  Hermes files go up as one tar archive over an exec session; in a
new Box that is the same session that reports its home directory.
"""

from __future__ import annotations

import logging
import shlex
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.environments.base import BaseEnvironment
from tools.environments.base_output import _ThreadedProcessHandle

from reference.common import tar_transfer
from reference.common.cwd import HermesDefaultCwd
from reference.common.finalize import CleanupOffThread
from reference.common.naming import sandbox_name
from reference.common.overlap import alongside
from reference.common.passthrough import PassthroughEnvironment
from reference.common.redact import redact
from reference.common.stdin import encode_stdin, report_stdin_error
from reference.upstash_box import session
from reference.upstash_box.boxes import USABLE, Account, BoxGone, connection_error
from reference.upstash_box.settings import KEY_VAR, Settings

if TYPE_CHECKING:
    from upstash_box import Box

logger = logging.getLogger("reference.upstash_box")


def _finished(text: str, exit_code: int) -> _ThreadedProcessHandle:
    """The handle of a command that did not start: ``text`` is its whole output."""
    return _ThreadedProcessHandle(lambda: (text, exit_code))


class UpstashBoxEnvironment(HermesDefaultCwd, PassthroughEnvironment, CleanupOffThread, BaseEnvironment):
    passthrough_blocked = frozenset({KEY_VAR})

    def __init__(self, *, account: Account, settings: Settings, task_id: str, cwd: str, timeout: int):
        self._account = account
        self._settings = settings
        self._task_id = task_id
        self._lock = threading.RLock()
        self._closed = False
        self._replace_next = False
        self._sync: Any = None
        self._contact: session.FirstContact | None = None  # a new Box's first session, while it is open
        self._persistent = settings.persistent
        # A per-session Box lasts the whole session: no teardown after each turn.
        self._session_scoped = not settings.persistent
        self._box = self._acquire()
        super().__init__(cwd=cwd, timeout=timeout)
        self._home = ""
        self._prepare()

    # -- the Box ---------------------------------------------------------------------
    @property
    def box_id(self) -> str:
        box_id: str = self._box.id  # the SDK keeps the id untyped
        return box_id

    def _name(self) -> str:
        return sandbox_name(self._settings.name_prefix, self._task_id, unique=not self._settings.persistent)

    def _new_box(self, name: str) -> Box[Any]:
        s = self._settings
        box, attached = self._account.create(
            name, labels=s.labels, size=s.size, runtime=s.runtime, keep_alive=s.keep_alive
        )
        logger.info("using Box %s (%s) for task %s", box.id, name, self._task_id)
        return self._ready(box) if attached else box

    def _acquire(self) -> Box[Any]:
        name = self._name()
        if not self._settings.persistent:
            return self._new_box(name)
        box = self._account.find(name)
        return self._new_box(name) if box is None else self._ready(box)

    def _ready(self, box: Box[Any]) -> Box[Any]:
        """A found Box: resume it if paused; never replace one in the error state."""
        state = self._account.state(box)
        if state == "paused":
            logger.info("resuming paused Box %s", box.id)
            self._account.resume(box)
        elif state == "error":
            box.close()
            raise connection_error(
                f"Box {box.id} is in the error state; it was not replaced, so nothing is lost. "
                "Inspect it in the Upstash console, then delete it to start over"
            )
        return box

    def _prepare(self) -> None:
        """The first contact (home directory, Hermes's files) and the session bootstrap, side by side:
        neither reads what the other writes (the files go under $HOME/.hermes, the snapshot to /tmp),
        and the bootstrap changes to the session's cwd itself, so it need not wait for $HOME."""
        alongside(self._first_contact, self.init_session, name="upstash-first-contact")

    def _first_contact(self) -> None:
        """Learn the Box's home directory and push Hermes's files there, in one exec session."""
        try:
            contact = session.FirstContact(self._box)
        except Exception as exc:
            raise connection_error(
                f"Box {self._box.id} did not start a session", exc, secrets=self._account.secrets
            ) from None
        try:
            home, code = contact.home()
            if not home.startswith("/"):
                raise connection_error(f"Box {self._box.id} did not report its home directory (exit {code})")
            self._home = home
            self._contact = contact
            self._start_sync()  # its first archive goes through this session
        finally:
            self._contact = None
            contact.close()

    def _capture(self, argv: list[str], stdin_data: bytes | None = None) -> tuple[bytes, int]:
        return session.capture(self._box, argv, cwd="/", stdin_data=stdin_data)

    # -- file sync -------------------------------------------------------------------
    def _start_sync(self) -> None:
        from tools.environments.file_sync import FileSyncManager, iter_sync_files

        base = f"{self._home}/.hermes"
        self._sync = FileSyncManager(
            get_files_fn=lambda: iter_sync_files(container_base=base),
            upload_fn=lambda host, remote: self._upload_archive([(host, remote)]),
            delete_fn=self._delete_files,
            bulk_upload_fn=self._upload_archive,
            bulk_download_fn=self._download_archive,
        )
        self._sync.sync(force=True)

    def _upload_archive(self, pairs: list[tuple[str, str]]) -> None:
        archive = tar_transfer.pack(pairs)
        contact, self._contact = self._contact, None
        if contact is not None:
            out, code = contact.unpack(archive)
        else:
            out, code = self._capture(["tar", "-xf", "-", "-C", "/", "--no-same-owner"], archive)
        if code != 0:
            raise RuntimeError(f"unpacking the Hermes files in the Box failed: {out[-300:]!r}")

    def _delete_files(self, remote_paths: list[str]) -> None:
        out, code = self._capture(["bash", "-c", "rm -f -- " + " ".join(shlex.quote(p) for p in remote_paths)])
        if code != 0:
            raise RuntimeError(f"deleting synced files in the Box failed: {out[-300:]!r}")

    def _download_archive(self, dest: Path) -> None:
        base = f"{self._home}/.hermes".lstrip("/")
        out, code = self._capture(
            [
                "bash",
                "-c",
                f"[ -d /{shlex.quote(base)} ] || exit 0; tar -cf - -C / --exclude='*.sock' {shlex.quote(base)}",
            ]
        )
        if code != 0:
            raise RuntimeError(f"packing the Hermes files in the Box failed (exit {code})")
        Path(dest).write_bytes(out)

    # -- commands ----------------------------------------------------------------------
    def _before_execute(self) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"the Box environment for task {self._task_id} was cleaned up")
            if self._replace_next:
                self._replace()
        if self._sync is not None:
            self._sync.sync()

    def _replace(self) -> None:
        """The previous command found the Box deleted: this command gets a new one."""
        self._replace_next = False
        old = self._box.id
        self._box = self._new_box(self._name())
        logger.info("Box %s was deleted outside Hermes; replaced by %s", old, self._box.id)
        mark = getattr(self, "_mark_recreated", None)
        if callable(mark):
            mark()
        self._home = ""
        self._snapshot_ready = False
        self._prepare()

    def _run_bash(
        self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
    ) -> Any:
        argv = ["bash", "-l", "-c", cmd_string] if login else ["bash", "-c", cmd_string]
        payload, stdin_failed = encode_stdin(stdin_data)
        for attempt in (1, 2):
            try:
                return report_stdin_error(
                    session.start(
                        self._box,
                        argv,
                        cwd=self._home or "/",  # "/" for the bootstrap while the first contact learns $HOME
                        stdin_data=payload,
                        open_timeout_s=max(1.0, float(timeout)),
                    ),
                    stdin_failed,
                )
            except session.OpenTimeout as exc:
                return _finished(f"upstash_box: {exc}\n", 124)
            except Exception as exc:
                refusal = self._why_not_started(exc, retry=attempt == 1)
                if refusal is None:
                    continue  # the Box was paused and is resumed: try once more
                return _finished(refusal, 1)
        raise AssertionError("unreachable")

    def _why_not_started(self, exc: BaseException, *, retry: bool) -> str | None:
        """Explain a session that would not start, after resuming a paused Box once.

        Never raises: the service may have started the command before the session
        failed, and Hermes runs a command again when execute() raises.
        """
        try:
            state = self._account.state(self._box)
        except Exception:
            return self._may_have_run(exc)
        if state == "paused" and retry:
            logger.info("Box %s was paused outside Hermes; resuming it once", self._box.id)
            try:
                self._account.resume(self._box)
            except BoxGone:
                state = "deleted"
            else:
                return None
        if state == "deleted":
            with self._lock:
                self._replace_next = True
            return (
                f"upstash_box: Box {self._box.id} no longer exists (deleted outside Hermes); the command "
                "did not run. The next command runs in a new Box."
            )
        if state == "error":
            return (
                f"upstash_box: Box {self._box.id} is in the error state; the command did not run and the "
                "Box was not replaced. Inspect it in the Upstash console, then delete it to start over."
            )
        if state in USABLE:
            return self._may_have_run(exc)
        return f"upstash_box: Box {self._box.id} is {state}; the command did not run."

    def _may_have_run(self, exc: BaseException) -> str:
        cause = redact(f"{type(exc).__name__}: {exc}", self._account.secrets)
        return (
            f"upstash_box: the exec session in Box {self._box.id} failed ({cause}). The command may have "
            "started; it was not sent again. Check its effects before running it again."
        )

    # -- teardown ----------------------------------------------------------------------
    def cleanup(self, force_remove: bool = False) -> None:
        """Persistent: pause the Box (or leave a keep-alive Box running).  Otherwise, or with
        ``force_remove`` (the prompt probe, a user's teardown): delete it."""
        with self._lock:
            if self._closed or not hasattr(self, "_box"):
                return
            self._closed = True
        box, account = self._box, self._account
        try:
            state = account.state(box)
        except Exception:
            state = "unknown"
        if state == "deleted":
            box.close()
            return  # already gone: counts as deleted
        if self._sync is not None and state in USABLE:
            self._sync.sync_back()
        if self._settings.persistent and not force_remove:
            if self._settings.keep_alive:
                logger.info("leaving keep-alive Box %s running", box.id)
            elif state in USABLE:
                account.pause(box)
            box.close()
            return
        if account.delete(box):
            return  # only the Box this environment created, by its id
        with self._lock:
            self._closed = False  # kept: a later cleanup may try the delete again

    def wait_for_cleanup(self, timeout: float = 15.0) -> None:
        self.cleanup()
