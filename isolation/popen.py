"""BoxPopen: a subprocess.Popen whose process a box's init started, inside the box.

The box's init forks the command and reaps it; this side holds a pidfd of
the command (signals cannot reach a recycled pid) and learns the exit status
from the init.  Pipes, ``communicate``, ``wait(timeout)``, ``poll`` and the
context manager are Popen's own.  ``pid`` is the command's pid on the host,
``box_pid`` the one it has inside the box.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from isolation import box_init


class ExitSlot:
    """One command's link to the box's init: its pidfd, and the socket its exit status comes on.

    Whoever waits reads the socket itself (no thread in between); the init
    closes it after the exit report, or dies, which counts as SIGKILL: the
    kernel ended every process of the box with it.  ``channel`` is the
    socket's Channel when the caller has read from it already (the exit
    report may be among what it read).
    """

    def __init__(
        self, sock: socket.socket, box_pid: int, host_pid: int, pidfd: int, channel: box_init.Channel | None = None
    ):
        self.box_pid = box_pid
        self.host_pid = host_pid
        self.code: int | None = None
        self._sock = sock
        self._channel = channel if channel is not None else box_init.Channel(sock)  # kept: a part-read frame too
        self._pidfd = pidfd
        self._lock = threading.Lock()  # one reader of the socket at a time; pidfd use vs close
        self._take(alive=True)  # an exit report the given channel has already read

    def wait(self, timeout: float | None) -> bool:
        """True once the exit status is known; waits up to ``timeout`` (None: for ever, 0: not at all)."""
        if self.code is not None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._lock.acquire(timeout=-1 if timeout is None else max(timeout, 0)):
            return self.code is not None
        try:
            while self.code is None:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                ready, _, _ = select.select([self._sock], [], [], left)
                if not ready:
                    return False
                self._receive()
            return True
        finally:
            self._lock.release()

    def _receive(self) -> None:
        try:
            alive = self._channel.fill()
        except OSError:
            alive = False
        self._take(alive)

    def _take(self, alive: bool) -> None:
        message = self._channel.pending()
        if message is not None and message.get("op") == "exit":
            self._finish(int(message["code"]))
        elif not alive:
            self._finish(-signal.SIGKILL)

    def _finish(self, code: int) -> None:
        self.code = code
        fd, self._pidfd = self._pidfd, -1
        if fd != -1:
            os.close(fd)
        self._sock.close()

    def signal(self, signum: int) -> None:
        """Signal the command itself while it runs (through its pidfd: never a recycled pid)."""
        with self._lock:
            if self._pidfd != -1:
                with contextlib.suppress(ProcessLookupError, OSError):
                    signal.pidfd_send_signal(self._pidfd, signum)

    def __del__(self) -> None:
        if getattr(self, "_pidfd", -1) != -1:
            with contextlib.suppress(OSError):
                os.close(self._pidfd)


Launcher = Callable[[list[str], dict[str, str], str, list[int], bool], ExitSlot]


class BoxPopen(subprocess.Popen):
    def __init__(self, args: Any, *, launch: Launcher, tty: bool = False, **kwargs: Any):
        self._launch = launch
        self._tty = tty
        self._slot: ExitSlot | None = None
        self.box_pid: int | None = None
        super().__init__(args, **kwargs)

    # Popen calls this with its positional arguments; only the descriptors and env/cwd matter here.
    def _execute_child(
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: Any,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: Any,
        shell: Any,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *rest: Any,
    ) -> None:
        argv = [os.fsdecode(a) for a in ([args] if isinstance(args, (str, bytes, os.PathLike)) else args)]
        if shell:
            argv = ["/bin/sh", "-c", *argv]
        if executable is not None:
            argv[0] = os.fsdecode(executable)
        environ = {os.fsdecode(k): os.fsdecode(v) for k, v in (env if env is not None else {}).items()}
        where = os.fsdecode(cwd) if cwd is not None else "/"
        for text in (*argv, *environ, *environ.values(), where):
            if "\0" in text:
                raise ValueError("embedded null byte")
        devnull = -1
        try:
            wanted = []
            for fd in (p2cread, c2pwrite, errwrite):
                if fd == -1:
                    if devnull == -1:
                        devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
                    fd = devnull
                wanted.append(fd)
            slot = self._launch(argv, environ, where, wanted, self._tty)
        finally:
            if devnull != -1:
                os.close(devnull)
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]  # Popen's own helper, private so not in typeshed
        self._slot = slot
        self.pid = slot.host_pid
        self.box_pid = slot.box_pid
        self._child_created = True

    def _internal_poll(self, _deadstate: Any = None, *_: Any, **__: Any) -> int | None:
        slot = self._slot
        if self.returncode is None and slot is not None and slot.wait(0):
            self.returncode = slot.code
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        slot = self._slot
        if self.returncode is None and slot is not None:
            if not slot.wait(timeout):
                assert timeout is not None  # only a bounded wait runs out
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = slot.code
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.poll()
        if self.returncode is None and self._slot is not None:
            self._slot.signal(sig)
