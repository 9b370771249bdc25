"""Asynchronous access to a box process for the fakes' event loops: non-blocking pipe I/O, its exit, its output.

Output is read only when the consumer asks for the next chunk, through a
one-slot queue, so a client that stops reading stops the reads and the
process blocks on its full pipe: nothing is buffered beyond a few chunks.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import threading
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

from fakes.world import BoxProcess

_TICK_NS = 1_000_000_000 // (os.sysconf("SC_CLK_TCK") or 100)


async def _ready(fd: int, *, write: bool = False) -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not fut.done():
            fut.set_result(None)

    (loop.add_writer if write else loop.add_reader)(fd, wake)
    try:
        await fut
    finally:
        (loop.remove_writer if write else loop.remove_reader)(fd)


async def read_some(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes as soon as any are available; b"" at EOF (a PTY's EIO included)."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await _ready(fd)
        except OSError as exc:
            if exc.errno == errno.EIO:  # the PTY's other side is closed
                return b""
            raise


async def write_all(fd: int, data: bytes) -> bool:
    """Write everything, waiting while the pipe is full; False if the reader is gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            await _ready(fd, write=True)
        except (BrokenPipeError, OSError):
            return False
    return True


@dataclass(frozen=True)
class Exit:
    code: int
    cpu_ns: int


def _cpu_ns(pid: int) -> int:
    """User + system CPU of the process and its reaped children, read while it is a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) * _TICK_NS
    except (OSError, IndexError, ValueError):
        return 0


async def wait_exit(proc: BoxProcess) -> Exit:
    """Wait for the main process without a thread (a pidfd), then reap it."""
    try:
        # Once reaped, the pid may already name another process: never wait on that one.
        pidfd = None if proc.popen.returncode is not None else os.pidfd_open(proc.pid)
    except ProcessLookupError:
        pidfd = None  # already reaped by someone's poll()
    except (AttributeError, OSError):
        return await _wait_in_thread(proc)
    if pidfd is not None:
        try:
            await _ready(pidfd)
        finally:
            os.close(pidfd)
    cpu = _cpu_ns(proc.pid) if proc.popen.returncode is None else 0
    return Exit(proc.wait(), cpu)


def _resolve(fut: asyncio.Future[int], code: int) -> None:
    if not fut.done():
        fut.set_result(code)


async def _wait_in_thread(proc: BoxProcess) -> Exit:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()

    def waiter() -> None:
        code = proc.wait()
        loop.call_soon_threadsafe(_resolve, fut, code)

    threading.Thread(target=waiter, daemon=True, name=f"wait-{proc.pid}").start()
    return Exit(await fut, 0)


def output_fds(proc: BoxProcess) -> list[tuple[str, int]]:
    """(stream name, non-blocking fd) of what the process writes: the PTY, or stdout and stderr."""
    if proc.pty_master is not None:
        pairs = [("stdout", proc.pty_master)]
    else:
        stdout, stderr = proc.outputs()
        pairs = [("stdout", stdout.fileno()), ("stderr", stderr.fileno())]
    for _, fd in pairs:
        os.set_blocking(fd, False)
    return pairs


_reapers: set[asyncio.Future[Any]] = set()


def finish(proc: BoxProcess, exited: asyncio.Future[Any]) -> None:
    """End a command's I/O; if it is still running (its client left), kill its group.

    The exit waiter is kept running so the process is reaped, never left a zombie.
    """
    if not exited.done():
        proc.signal(signal.SIGCONT)  # a stopped (TSTP) group must wake to die
        proc.signal(signal.SIGKILL)
        _reapers.add(exited)
        exited.add_done_callback(_reapers.discard)
    close_io(proc)


def close_io(proc: BoxProcess) -> None:
    """Close the server's ends of the process's pipes (through their file objects) or its PTY."""
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    if proc.pty_master is not None:
        with contextlib.suppress(OSError):
            os.close(proc.pty_master)
        proc.pty_master = None


async def output_events(
    streams: Sequence[tuple[str, int]], exited: asyncio.Future[Any], *, chunk: int, quiet_s: float, max_drain_s: float
) -> AsyncGenerator[tuple[str, bytes], None]:
    """Yield (stream, bytes) in arrival order until the output is over.

    Over means every stream is at EOF, or the main process has exited and then
    nothing arrived for ``quiet_s`` (a detached child may hold the pipe open for
    ever), or ``max_drain_s`` of waiting after the exit.  Time the consumer
    spends between chunks (a slow client) does not count.
    """
    queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(maxsize=1)

    async def pump(name: str, fd: int) -> None:
        with contextlib.suppress(OSError):  # a read error ends the stream like EOF
            while data := await read_some(fd, chunk):
                await queue.put((name, data))
        await queue.put((name, b""))

    pumps = [asyncio.create_task(pump(name, fd)) for name, fd in streams]
    open_streams, drain_left = len(pumps), max_drain_s
    loop = asyncio.get_running_loop()
    try:
        while open_streams:
            if not exited.done():
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait({getter, exited}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await getter
                    continue
                name, data = getter.result()
            else:
                if drain_left <= 0:
                    return
                began = loop.time()
                try:
                    name, data = await asyncio.wait_for(queue.get(), min(quiet_s, drain_left))
                except TimeoutError:
                    return
                finally:
                    drain_left -= loop.time() - began
            if not data:
                open_streams -= 1
                continue
            yield name, data
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)


class StdinWriter:
    """Feeds a process's stdin from a bounded queue, so control frames never wait on a full pipe.

    ``close()`` is EOF: the pipe is closed (a PTY gets ^D instead, since closing
    the master would hang up the terminal).
    """

    def __init__(self, proc: BoxProcess, *, limit: int):
        self._proc = proc
        self._fd = proc.pty_master if proc.pty_master is not None else proc.pipes()[0].fileno()
        os.set_blocking(self._fd, False)
        self._limit = limit
        self._queue: deque[bytes | None] = deque()
        self._queued = 0
        self._changed = asyncio.Event()
        self.broken = False
        self._task = asyncio.create_task(self._run())

    async def write(self, data: bytes) -> None:
        while self._queued >= self._limit and not self._task.done():
            self._changed.clear()
            await self._changed.wait()
        self._queue.append(data)
        self._queued += len(data)
        self._changed.set()

    def close(self) -> None:
        self._queue.append(None)
        self._changed.set()

    async def _run(self) -> None:
        while True:
            while not self._queue:
                self._changed.clear()
                await self._changed.wait()
            item = self._queue.popleft()
            if item is None:
                if self._proc.pty_master is not None:
                    await write_all(self._fd, b"\x04")
                elif self._proc.stdin is not None:
                    self._proc.stdin.close()
                return
            self._queued -= len(item)
            self._changed.set()
            if not self.broken and not await write_all(self._fd, item):
                self.broken = True  # the process closed its stdin; later data is dropped

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
