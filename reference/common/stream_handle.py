"""A Hermes ProcessHandle for commands whose output arrives as a stream of chunks.

Remote backends receive output on a reader thread (WebSocket frames, NDJSON
lines).  ``feed`` writes each chunk into an OS pipe that Hermes's drain thread
reads: when Hermes reads slower than output arrives, the pipe fills, ``feed``
blocks, the reader thread stops reading the connection and the server stops
sending, so output is never dropped and memory stays bounded.  ``kill``
releases a blocked ``feed`` (output after a kill is not wanted) and runs the
backend's stop action on its own thread, so Hermes never waits on the network.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable
from typing import IO


class StreamProcessHandle:
    def __init__(self, stop: Callable[[], None] | None = None):
        read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)
        self._stdout = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self._stop = stop
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._returncode: int | None = None
        self._closed = False
        self.killed = False
        # Read by Hermes's wait loop when present (stdin write failures).
        self._hermes_stdin_errors: list[BaseException] = []
        self._hermes_stdin_thread: threading.Thread | None = None

    # -- the backend side ----------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Hand output to Hermes, waiting while its pipe is full."""
        view = memoryview(data)
        with self._lock:
            while view and not self._closed:
                if self.killed:
                    return
                try:
                    view = view[os.write(self._write_fd, view) :]
                except BlockingIOError:
                    select.select([], [self._write_fd], [], 0.1)
                except OSError:
                    return  # Hermes closed its end: nobody wants the rest

    def finish(self, code: int) -> None:
        """The command ended: record its status and close the pipe (EOF for Hermes)."""
        with self._lock:
            if self._returncode is None:
                self._returncode = code
            if not self._closed:
                self._closed = True
                os.close(self._write_fd)
        self._done.set()

    def set_stop(self, stop: Callable[[], None]) -> None:
        self._stop = stop

    # -- the ProcessHandle Hermes uses ---------------------------------------------
    @property
    def stdout(self) -> IO[str]:
        return self._stdout

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @property
    def ended(self) -> threading.Event:
        """Set once ``finish`` recorded the status."""
        return self._done

    def poll(self) -> int | None:
        return self._returncode if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> int | None:
        self._done.wait(timeout)
        return self._returncode

    def kill(self) -> None:
        if self.killed:
            return
        self.killed = True  # a blocked feed sees it within its 0.1 s wait and gives up
        stop = self._stop
        if stop is not None:
            threading.Thread(target=_quietly, args=(stop,), daemon=True, name="remote-stop").start()


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        pass
