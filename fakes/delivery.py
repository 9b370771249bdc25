"""Replies damaged on purpose: how every fake delivers a response under a corrupting fault.

Two ways, both used by more than one vendor fake:

- ``corrupt(response, fault, closing)``: a finished reply, damaged whole
  (``truncate``: half the body; ``drop``: ``after_bytes`` of it, then the
  connection is cut; ``half-close``: that much, then silence; ``garbage``:
  the fault's payload instead of the body);
- ``Delivery``: a body sent piece by piece (NDJSON streams, or a finished
  reply through ``FaultyReply``), the fault cutting in at ``after_bytes``:
  ``drop`` and ``half-close`` as above, ``truncate`` sends half of the first
  line that starts at or after ``after_bytes`` and closes, ``garbage`` puts
  the payload there as a line of its own and carries on.

A connection is cut by raising ``DroppedConnection`` after the response
started: uvicorn then closes the socket without finishing the body (a
WebSocket session returns without a close frame).  ``HIDE_DROPS`` keeps
those deliberate cuts out of the server's error log.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from fakes.faults import Fault

CORRUPTING = ("drop", "truncate", "half-close", "garbage")


class DroppedConnection(Exception):
    """Raised by a body iterator, a streamed reply or a session to cut the connection (a "drop" fault)."""


_unfinished_lock = threading.Lock()
_unfinished = 0  # replies cut on purpose whose "returned without completing" log line is still to come


class _HideDrops(logging.Filter):
    """Keep the server's notes about replies cut on purpose out of the error log."""

    def filter(self, record: logging.LogRecord) -> bool:
        global _unfinished
        if str(record.msg).startswith("ASGI callable returned without completing response"):
            with _unfinished_lock:
                if _unfinished > 0:
                    _unfinished -= 1
                    return False
        pending = [record.exc_info[1]] if record.exc_info and record.exc_info[1] else []
        seen: set[int] = set()  # exception chains can be cyclic
        while pending:
            exc = pending.pop()
            if id(exc) in seen:
                continue
            seen.add(id(exc))
            if isinstance(exc, DroppedConnection):
                return False
            if isinstance(exc, BaseExceptionGroup):
                pending.extend(exc.exceptions)
            pending.extend(e for e in (exc.__cause__, exc.__context__) if e is not None)
        return True


HIDE_DROPS = _HideDrops()


async def hang(closing: threading.Event, request: Request | None = None) -> None:
    """Never answer: wait until the client goes away or the server shuts down."""
    while not closing.is_set():
        if request is not None and await request.is_disconnected():
            return
        await asyncio.sleep(0.1)


async def wait_gone(receive: Receive, closing: threading.Event, gone: asyncio.Event | None = None) -> None:
    """Until the client disconnects or the server shuts down (``gone``: the caller's own disconnect watcher)."""
    while not closing.is_set():
        if gone is not None:
            try:
                await asyncio.wait_for(gone.wait(), 0.1)
                return
            except TimeoutError:
                continue
        try:
            message = await asyncio.wait_for(receive(), 0.1)
        except TimeoutError:
            continue
        if message.get("type") == "http.disconnect":
            return


class CuttableStream(StreamingResponse):
    """A streamed reply whose body iterator may raise DroppedConnection to cut the connection."""

    async def stream_response(self, send: Send) -> None:
        global _unfinished
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in self.body_iterator:
                if not isinstance(chunk, bytes | memoryview):
                    chunk = chunk.encode(self.charset)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except DroppedConnection:
            with _unfinished_lock:
                _unfinished += 1
            return  # no final chunk: uvicorn closes the connection mid-body
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def corrupt(response: Response, fault: Fault, closing: threading.Event) -> Response:
    """Deliver a finished ``response`` damaged the way ``fault`` says."""
    body = bytes(response.body)
    if fault.kind == "garbage":
        return Response(fault.payload.encode(), status_code=response.status_code, media_type=response.media_type)
    headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}

    async def damaged() -> AsyncIterator[bytes]:
        if fault.kind == "truncate":
            yield body[: len(body) // 2]
            return
        yield body[: fault.after_bytes]
        if fault.kind == "drop":
            raise DroppedConnection(fault.message)
        await hang(closing)  # half-close: headers (and maybe a prefix) sent, then nothing

    return CuttableStream(damaged(), status_code=response.status_code, headers=headers)


class Delivery:
    """Sends a response body piece by piece, applying a corrupting fault on the way."""

    def __init__(
        self,
        send: Send,
        receive: Receive,
        fault: Fault | None,
        closing: threading.Event,
        gone: asyncio.Event | None = None,
    ):
        self._send = send
        self._receive = receive
        self.closing = closing
        self.gone = gone  # set by the caller's own disconnect watcher, if it has one
        self.kind = fault.kind if fault is not None and fault.kind in CORRUPTING else None
        self.after = max(0, fault.after_bytes) if fault is not None else 0
        self.payload = (fault.payload if fault is not None else "").encode("utf-8", "replace")
        self.sent = 0
        self.stopped = False  # nothing more will be sent

    async def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        await self._send({"type": "http.response.start", "status": status, "headers": headers})

    async def _raw(self, data: bytes) -> None:
        if data:
            await self._send({"type": "http.response.body", "body": data, "more_body": True})
            self.sent += len(data)

    async def _cut(self, data: bytes, then: str) -> None:
        await self._raw(data)
        self.stopped = True
        if then == "half-close":
            await wait_gone(self._receive, self.closing, self.gone)
        raise DroppedConnection(then)  # the body never ends; uvicorn closes the socket

    async def body(self, data: bytes) -> None:
        """Send part of the body; NDJSON callers pass whole lines."""
        if self.stopped or not data:
            return
        if self.kind in ("drop", "half-close") and self.sent + len(data) >= self.after:
            await self._cut(data[: self.after - self.sent], self.kind)
            return
        if self.kind in ("truncate", "garbage"):
            offset = self._line_start(data)
            if offset is not None:
                await self._raw(data[:offset])
                rest = data[offset:]
                if self.kind == "garbage":
                    self.kind = None
                    await self._raw(self.payload + b"\n")
                    await self._raw(rest)
                    return
                newline = rest.find(b"\n")
                line = rest[: newline + 1] if newline >= 0 else rest
                await self._cut(line[: len(line) // 2], "drop")
                return
        await self._raw(data)

    def _line_start(self, data: bytes) -> int | None:
        """Offset in ``data`` of the first line start at or after ``after`` bytes of the body."""
        position = 0
        while position < len(data):
            if self.sent + position >= self.after:
                return position
            newline = data.find(b"\n", position)
            if newline < 0:
                return None
            position = newline + 1
        return None

    async def end(self) -> None:
        """Finish the body, unless a pending fault ends it another way."""
        if self.stopped:
            return
        if self.kind == "garbage":
            self.kind = None
            await self._raw(self.payload + b"\n")
        elif self.kind in ("drop", "half-close", "truncate"):
            await self._cut(b"", "half-close" if self.kind == "half-close" else "drop")
            return
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})
        self.stopped = True


class FaultyReply:
    """A finished reply delivered through ``Delivery`` under a corrupting fault: the action happened, its
    answer is damaged line by line."""

    def __init__(self, response: Response, fault: Fault, closing: threading.Event):
        self.response, self.fault, self.closing = response, fault, closing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = self.response.raw_headers
        if self.fault.kind == "garbage":  # the body grows; let the server chunk it
            headers = [(k, v) for k, v in headers if k != b"content-length"]
        delivery = Delivery(send, receive, self.fault, self.closing)
        await delivery.start(self.response.status_code, headers)
        await delivery.body(bytes(self.response.body))
        await delivery.end()


class Silence:
    """Accept the request and never answer; the connection is dropped once the client or the server leaves."""

    def __init__(self, closing: threading.Event):
        self.closing = closing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await wait_gone(receive, self.closing)
        raise DroppedConnection("silence")
