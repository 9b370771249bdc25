"""Run one command in a Box over a live exec session.

stdout and stderr frames both feed one StreamProcessHandle, in arrival order,
so Hermes sees them merged; the SDK's reader thread blocks while Hermes's pipe
is full, which is the backpressure.  stdin is streamed in chunks and then
always closed.  A stop (timeout or interrupt) sends KILL to the process tree
through the session and closes it shortly after, off Hermes's thread.

``FirstContact`` is a new Box's first session: it reports ``$HOME`` and then
unpacks at most one tar archive from its stdin, so learning where Hermes's
files go and putting them there is one session, not two.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from reference.common.stream_handle import StreamProcessHandle

if TYPE_CHECKING:
    from upstash_box import Box

logger = logging.getLogger("reference.upstash_box")

STDIN_CHUNK = 256 * 1024
CLOSE_GRACE_S = 2.0
STDIN_RACE_S = 2.0  # how long a failed stdin send waits to learn whether the command had already ended
LOST = "\n[upstash_box: the exec session ended without an exit status (connection lost or server error)]\n"


# Print $HOME, then unpack the archive that follows a "tar" line on stdin (bash's read takes no byte
# past the newline from a pipe); any other line, or none, ends the session with nothing unpacked.
CONTACT = (
    'printf "%s\\n" "$HOME"; IFS= read -r next || exit 0; [ "$next" = tar ] || exit 0; '
    "exec tar -xf - -C / --no-same-owner"
)


class OpenTimeout(TimeoutError):
    """The service accepted the session but did not start it in time."""


def _open(box: Box[Any], argv: list[str], cwd: str, handle: StreamProcessHandle, within_s: float) -> Any:
    """Open the exec session, giving up after ``within_s``: a silent service must not
    hold Hermes's thread past the command's timeout (Hermes's own timer starts only
    once this returns).  A session that opens after that is closed at once."""
    lock = threading.Lock()
    outcome: dict[str, Any] = {}
    opened = threading.Event()

    def attempt() -> None:
        try:
            got = box.exec.session(argv=argv, cwd=cwd, on_stdout=handle.feed, on_stderr=handle.feed)
        except BaseException as exc:
            with lock:
                outcome["error"] = exc
        else:
            with lock:
                late = outcome.get("abandoned", False)
                outcome["session"] = got
            if late:
                got.close()
        opened.set()

    threading.Thread(target=attempt, daemon=True, name="upstash-box-open").start()
    opened.wait(within_s)
    with lock:
        if "error" in outcome:
            raise outcome["error"]
        if "session" not in outcome:
            outcome["abandoned"] = True
            raise OpenTimeout(f"the Box did not start the exec session within {within_s:g}s")
        return outcome["session"]


def start(
    box: Box[Any], argv: list[str], *, cwd: str, stdin_data: bytes | None, open_timeout_s: float = 120.0
) -> StreamProcessHandle:
    """Start ``argv`` in ``box``; raises the SDK's BoxError if the session cannot start,
    OpenTimeout if it does not start within ``open_timeout_s``."""
    handle = StreamProcessHandle()
    session = _open(box, argv, cwd, handle, open_timeout_s)

    def stop() -> None:
        try:
            session.kill("KILL")
        finally:
            closer = threading.Timer(CLOSE_GRACE_S, session.close)
            closer.daemon = True
            closer.start()

    handle.set_stop(stop)
    feeder = threading.Thread(
        target=_feed_stdin, args=(session, stdin_data, handle), daemon=True, name="upstash-box-stdin"
    )
    handle._hermes_stdin_thread = feeder
    feeder.start()
    threading.Thread(target=_await_exit, args=(session, handle), daemon=True, name="upstash-box-exit").start()
    return handle


def _feed_stdin(session: Any, data: bytes | None, handle: StreamProcessHandle) -> None:
    try:
        view = memoryview(data or b"")
        while view:
            session.write(bytes(view[:STDIN_CHUNK]))
            view = view[STDIN_CHUNK:]
        session.end_stdin()
    except Exception as exc:
        # The session's reader may not have seen the exit yet: the command can end (and the
        # server close the session) while the last stdin frame is still going out.  A send
        # that fails because the command already ended normally lost nothing it would read.
        code = handle.wait(STDIN_RACE_S)
        if not handle.killed and (code is None or code == -1):
            handle._hermes_stdin_errors.append(exc)


def _await_exit(session: Any, handle: StreamProcessHandle) -> None:
    code = session.wait()
    if code == -1 and not handle.killed:
        handle.feed(LOST.encode())
    handle.finish(code)
    session.close()


def capture(
    box: Box[Any], argv: list[str], *, cwd: str, stdin_data: bytes | None = None, timeout: float = 300.0
) -> tuple[bytes, int]:
    """Run ``argv`` to completion and return (stdout + stderr bytes, exit code)."""
    chunks: list[bytes] = []
    session = box.exec.session(argv=argv, cwd=cwd, on_stdout=chunks.append, on_stderr=chunks.append)
    try:
        try:
            view = memoryview(stdin_data or b"")
            while view:
                session.write(bytes(view[:STDIN_CHUNK]))
                view = view[STDIN_CHUNK:]
            session.end_stdin()
        except Exception:
            # The command can end (and the server close the session) before its stdin is closed;
            # the exit code below tells a normal end (-1: the session was lost).
            pass
        code = session.wait(timeout)
    except TimeoutError:
        session.kill("KILL")
        code = -1
    finally:
        session.close()
    return b"".join(chunks), code


class FirstContact:
    """One session in a new Box: its home directory first, then at most one archive unpacked."""

    def __init__(self, box: Box[Any]):
        self._lock = threading.Lock()
        self._stdout = bytearray()
        self._stderr = bytearray()
        self._line = threading.Event()
        self._used = False
        self._session = box.exec.session(
            argv=["bash", "-c", CONTACT], cwd="/", on_stdout=self._out, on_stderr=self._err
        )

    def _out(self, data: bytes) -> None:
        with self._lock:
            self._stdout += data
            if b"\n" in self._stdout:
                self._line.set()

    def _err(self, data: bytes) -> None:
        with self._lock:
            self._stderr += data[:4096]

    def home(self, timeout: float = 60.0) -> tuple[str, int | None]:
        """(the first line of output, None) once it came; ("", exit code) if the session ended first."""
        deadline = time.monotonic() + timeout
        while not self._line.wait(0.02):
            try:
                code = self._session.wait(0)
            except TimeoutError:
                code = None
            if code is not None and not self._line.is_set():
                return "", int(code)
            if time.monotonic() > deadline:
                return "", -1
        with self._lock:
            line = bytes(self._stdout).split(b"\n", 1)[0]
        return line.decode("utf-8", "replace").strip(), None

    def unpack(self, archive: bytes, timeout: float = 300.0) -> tuple[bytes, int]:
        """Send ``archive`` to tar; (its output, exit code).  Once per session."""
        if self._used:
            raise RuntimeError("the first session of a Box unpacks one archive only")
        self._used = True
        try:
            self._session.write(b"tar\n")
            view = memoryview(archive)
            while view:
                self._session.write(bytes(view[:STDIN_CHUNK]))
                view = view[STDIN_CHUNK:]
            self._session.end_stdin()
        except Exception:
            pass  # tar may have ended early (a bad archive): its exit code tells
        try:
            code = int(self._session.wait(timeout))
        except TimeoutError:
            self._session.kill("KILL")
            code = -1
        with self._lock:
            said = bytes(self._stdout).split(b"\n", 1)[-1] + bytes(self._stderr)
        return said, code

    def close(self) -> None:
        """End the session: nothing more to unpack, if nothing was."""
        try:
            if not self._used:
                self._used = True
                self._session.write(b"none\n")
                self._session.end_stdin()
                self._session.wait(CLOSE_GRACE_S)
        except Exception:
            pass  # closing below ends the process in any case
        finally:
            self._session.close()
