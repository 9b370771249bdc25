"""Stand-in for ``tools.environments.base_output``: process handles and output capture.

Written from the behaviour described in research/hermes-host.md section 3.3,
not from Hermes code.  A ProcessHandle is anything with poll(), kill(),
wait(timeout), a stdout stream and returncode; subprocess.Popen qualifies.
"""

from __future__ import annotations

import codecs
import os
import select
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from typing import IO, Any, Protocol

# Default of tool_output.max_bytes: what the foreground terminal tool keeps.
DEFAULT_MAX_OUTPUT_CHARS = 50_000
# How long the drain keeps reading after the shell exited when the pipe has no
# EOF because a backgrounded grandchild still holds it (Hermes issue 8340).
_DRAIN_GRACE_S = 0.3


class ProcessHandle(Protocol):
    def poll(self) -> int | None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int | None: ...

    @property
    def stdout(self) -> IO[str] | None: ...

    @property
    def returncode(self) -> int | None: ...


class _ThreadedProcessHandle:
    """Adapt a blocking ``exec_fn() -> (output, exit_code)`` to a ProcessHandle.

    Faithful to the host, including its flaw: an exception in exec_fn becomes
    returncode 1 with empty output (clause errors.state-message checks that
    backends do not rely on this).
    """

    def __init__(self, exec_fn: Callable[[], tuple[str, int]], cancel_fn: Callable[[], None] | None = None):
        self._cancel_fn = cancel_fn
        self._done = threading.Event()
        self._returncode: int | None = None
        self.error: BaseException | None = None
        read_fd, self._write_fd = os.pipe()
        self._stdout = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        threading.Thread(target=self._run, args=(exec_fn,), daemon=True, name="threaded-exec").start()

    def _run(self, exec_fn: Callable[[], tuple[str, int]]) -> None:
        try:
            output, code = exec_fn()
            data = (output or "").encode("utf-8", "surrogateescape")
            view = memoryview(data)
            while view:
                written = os.write(self._write_fd, view)
                view = view[written:]
            self._returncode = code
        except BaseException as exc:  # the host maps any failure to rc 1
            self.error = exc
            self._returncode = 1
        finally:
            try:
                os.close(self._write_fd)
            except OSError:
                pass
            self._done.set()

    @property
    def stdout(self) -> IO[str]:
        return self._stdout

    @property
    def returncode(self) -> int | None:
        return self._returncode

    def poll(self) -> int | None:
        return self._returncode if self._done.is_set() else None

    def kill(self) -> None:
        if self._cancel_fn is not None:
            try:
                self._cancel_fn()
            except Exception:
                pass

    def wait(self, timeout: float | None = None) -> int | None:
        self._done.wait(timeout)
        return self._returncode


class _BoundedOutputCollector:
    """Keep the first 40 % and the last 60 % of ``max_chars`` characters."""

    def __init__(self, max_chars: int | None):
        self.max_chars = max_chars
        self._head: list[str] = []
        self._head_len = 0
        self._tail: deque[str] = deque()
        self._tail_len = 0
        self.total = 0
        self._lock = threading.Lock()
        if max_chars is not None:
            self._head_cap = int(max_chars * 0.4)
            self._tail_cap = max_chars - self._head_cap

    def append(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self.total += len(text)
            if self.max_chars is None:
                self._head.append(text)
                return
            room = self._head_cap - self._head_len
            if room > 0:
                self._head.append(text[:room])
                self._head_len += min(room, len(text))
                text = text[room:]
            if not text:
                return
            self._tail.append(text)
            self._tail_len += len(text)
            while self._tail_len - len(self._tail[0]) >= self._tail_cap:
                self._tail_len -= len(self._tail.popleft())

    def render(self, suffix: str = "") -> tuple[str, bool]:
        """Return (text, truncated)."""
        with self._lock:
            head = "".join(self._head)
            tail = "".join(self._tail)
            if self.max_chars is None or self.total <= self.max_chars:
                return head + tail + suffix, False
            omitted = self.total - self.max_chars
            notice = f"\n\n... [OUTPUT TRUNCATED - {omitted:,} chars omitted out of {self.total:,} total] ...\n\n"
            tail = tail[-self._tail_cap :] if self._tail_cap else ""
            return head + notice + tail + suffix, True


def _pipe_stdin(proc: subprocess.Popen[Any], data: str) -> threading.Thread:
    """Write ``data`` to the child's stdin from a thread, then close it (EOF).

    Text that cannot be encoded is a write failure, published as
    ``proc._hermes_stdin_errors``; a reader that stops early (``head -c N``)
    closing the pipe is not.
    """
    errors: list[BaseException] = []
    proc._hermes_stdin_errors = errors  # type: ignore[attr-defined]

    def write() -> None:
        target = getattr(proc.stdin, "buffer", proc.stdin)
        try:
            payload = data.encode("utf-8", "surrogateescape")
            if target is not None:
                target.write(payload)
        except UnicodeEncodeError as exc:
            errors.append(exc)
        except OSError:
            pass
        finally:
            try:
                if target is not None:
                    target.close()
            except OSError:
                pass

    thread = threading.Thread(target=write, daemon=True, name="stdin-writer")
    thread.start()
    return thread


def _popen_bash(cmd: list[str], stdin_data: str | None = None, **kwargs: Any) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
        text=True,
        encoding="utf-8",
        errors="replace",
        **kwargs,
    )
    if stdin_data is not None:
        proc._hermes_stdin_thread = _pipe_stdin(proc, stdin_data)  # type: ignore[attr-defined]
    return proc


def drain(proc: ProcessHandle, sink: _BoundedOutputCollector) -> threading.Thread:
    """Start a thread that moves the handle's stdout into ``sink``.

    Reads raw bytes with select() when the stream has a real descriptor and
    stops shortly after the process exits even without EOF; otherwise it
    iterates the stream to its end.
    """

    def run() -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        stream = proc.stdout
        if stream is None:
            return
        try:
            fd = stream.fileno()
        except Exception:
            fd = None
        try:
            if not isinstance(fd, int) or fd < 0:
                for piece in stream:
                    sink.append(decoder.decode(piece) if isinstance(piece, bytes) else str(piece))
                return
            idle_since_exit = 0.0
            while True:
                try:
                    ready, _, _ = select.select([fd], [], [], 0.1)
                except (OSError, ValueError):
                    return
                if ready:
                    try:
                        chunk = os.read(fd, 65536)
                    except (OSError, ValueError):
                        return
                    if not chunk:
                        return
                    sink.append(decoder.decode(chunk))
                    idle_since_exit = 0.0
                elif proc.poll() is not None:
                    idle_since_exit += 0.1
                    if idle_since_exit >= _DRAIN_GRACE_S:
                        return
        except Exception:
            return
        finally:
            sink.append(decoder.decode(b"", final=True))

    thread = threading.Thread(target=run, daemon=True, name="stdout-drain")
    thread.start()
    return thread
