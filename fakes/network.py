"""A fake's network: a fixed round-trip time between its clients and its server.

On loopback a round trip costs tens of microseconds, so a client that makes
two calls per command looks as fast as one that makes one.  A real vendor is
tens of milliseconds away.  ``DelayedNetwork`` sits in front of a fake's
server as a TCP forward and gives every connection through it the time a
real network would:

- every byte takes half the round trip to cross, in each direction (order
  kept, nothing merged or split beyond what TCP itself does);
- a new connection pays ``handshake_rtts`` round trips before its first
  byte reaches the server: the handshakes a loopback ``connect()`` skips
  (two by default: TCP's, and TLS 1.3's on the vendors' HTTPS endpoints);
- with ``jitter_s``, each crossing takes up to that much longer, drawn at
  random (seeded) and never overtaking an earlier byte: a real path's round
  trip varies, and without that every result of a client that polls (as
  Hermes's wait loop does) lands on the same side of the same poll.

So an HTTP request on a warm connection costs one round trip, a new
connection three, a WebSocket session its connection plus its upgrade, and
a streamed answer arrives half a round trip after the server wrote it, as
over a real network.  Bandwidth is not limited.  Every client of the fake
pays the same: a backend and the vendor's minimal client compare like with
like.

The fake exports the network's address instead of its server's
(``delayed``), so unmodified SDKs and plugins go through it.  It runs on its
own event loop thread in the fake's process.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

CHUNK = 64 * 1024
QUEUED_CHUNKS = 256  # at most this much in flight per direction (16 MiB): a flood slows its sender
HANDSHAKE_RTTS = 2
START_TIMEOUT_S = 10.0


class DelayedNetwork:
    """A TCP forward to ``target`` that delays every byte by half of ``rtt_s`` each way."""

    def __init__(
        self,
        target: tuple[str, int],
        rtt_s: float,
        *,
        jitter_s: float = 0.0,
        handshake_rtts: int = HANDSHAKE_RTTS,
        host: str = "127.0.0.1",
        seed: int = 0,
    ):
        if rtt_s < 0 or jitter_s < 0:
            raise ValueError(f"a round-trip time and its jitter cannot be negative ({rtt_s} s, {jitter_s} s)")
        if handshake_rtts < 0:
            raise ValueError(f"handshake round trips cannot be negative ({handshake_rtts})")
        self.target = target
        self.rtt_s = rtt_s
        self.jitter_s = jitter_s
        self.handshake_rtts = handshake_rtts
        self._random = random.Random(seed)
        self.host = host
        self.port = 0
        self.connections = 0  # connections accepted so far
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    # -- control (any thread) -------------------------------------------------------------
    def start(self) -> int:
        """Listen on an ephemeral port of ``host``; the port."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._connection, self.host, 0, reuse_address=True)
                )
                self.port = int(self._server.sockets[0].getsockname()[1])
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=f"delayed-network-{self.target[1]}", daemon=True)
        self._thread.start()
        if not ready.wait(START_TIMEOUT_S):
            raise RuntimeError("the delayed network did not start listening")
        if failure:
            raise RuntimeError(f"the delayed network could not listen on {self.host}: {failure[0]}")
        return self.port

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(close(), loop).result(START_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(START_TIMEOUT_S)

    # -- the loop's side --------------------------------------------------------------------
    def _crossing(self) -> float:
        """Seconds one chunk takes to cross: half the round trip, and some of the jitter."""
        return self.rtt_s / 2 + (self._random.uniform(0, self.jitter_s) if self.jitter_s else 0.0)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        loop = asyncio.get_running_loop()
        accepted = loop.time()
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            upstream_reader, upstream = await asyncio.open_connection(*self.target)
            upstream_writer = upstream
            for end in (writer, upstream):
                sock = end.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            first = accepted + self.handshake_rtts * self.rtt_s + self._crossing()
            await asyncio.gather(
                _carry(reader, upstream, self._crossing, first),
                _carry(upstream_reader, writer, self._crossing, 0.0),
            )
        except (OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a peer went away, or the network is stopping: either way this connection ends
        finally:
            writer.close()
            if upstream_writer is not None:
                upstream_writer.close()
            self._tasks.discard(task)


async def _carry(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, crossing: Callable[[], float], not_before: float
) -> None:
    """Bytes from ``reader`` to ``writer``, each chunk ``crossing()`` seconds after it arrived, none before
    ``not_before`` (loop time) nor before an earlier chunk; end of file passes on the same way."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(QUEUED_CHUNKS)

    async def receive() -> None:
        last = not_before
        while True:
            try:
                data = await reader.read(CHUNK)
            except OSError:
                data = b""
            last = max(loop.time() + crossing(), last)
            await queue.put((last, data))
            if not data:
                return

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    receiving = asyncio.ensure_future(receive())
    try:
        await deliver()
    finally:
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await receiving


def delayed(fake: Any, rtt_s: float, *, jitter_s: float = 0.0, handshake_rtts: int = HANDSHAKE_RTTS) -> Any:
    """``fake`` (a FakeService with a server) behind a DelayedNetwork: its exported addresses point at
    the network, and stopping it stops the network too."""
    address = _address(fake.env)
    if address is None:
        raise ValueError(f"the {fake.name} fake exports no http(s) or ws(s) address to put a network in front of")
    host, port = address
    network = DelayedNetwork((host, port), rtt_s, jitter_s=jitter_s, handshake_rtts=handshake_rtts, host=host)
    proxied = network.start()
    env = {k: v.replace(f"{host}:{port}", f"{host}:{proxied}") for k, v in fake.env.items()}
    stop_fake: Callable[[], None] = fake.stop

    def stop() -> None:
        try:
            network.stop()
        finally:
            stop_fake()

    return replace(fake, env=env, _stop=stop)


def _address(env: dict[str, str]) -> tuple[str, int] | None:
    """The host and port of the first URL among ``env``'s values."""
    from urllib.parse import urlsplit

    for value in env.values():
        parts = urlsplit(value)
        if parts.scheme in ("http", "https", "ws", "wss") and parts.hostname and parts.port:
            return parts.hostname, parts.port
    return None
