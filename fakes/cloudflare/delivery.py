"""Sending a response body under a scripted fault.

``Delivery`` sends body bytes and applies the corrupting fault kinds:

- ``drop``: send ``after_bytes`` bytes of the body, then close the connection
  (a body shorter than that is sent whole, then the connection closes before
  the body's end);
- ``half-close``: the same, but keep the connection open and send nothing more
  until the client leaves (or the server stops);
- ``truncate``: at the first line start at or after ``after_bytes``, send the
  first half of that line and close;
- ``garbage``: at the first line start at or after ``after_bytes``, send
  ``payload`` as a line of its own, then carry on.

Closing a connection mid-body is done by raising ``DroppedConnection`` after the
response started: uvicorn then closes the socket without finishing the body.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from starlette.types import Receive, Send

from fakes.faults import Fault

CORRUPTING = ("drop", "half-close", "truncate", "garbage")


class DroppedConnection(Exception):
    """Raised after the response started: the server closes the connection mid-body."""


class _HideDrops(logging.Filter):
    """Keep scripted drops out of the server's error log."""

    def filter(self, record: logging.LogRecord) -> bool:
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


async def wait_gone(receive: Receive, closing: threading.Event, gone: asyncio.Event | None = None) -> None:
    """Until the client disconnects or the server shuts down."""
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


class Delivery:
    def __init__(self, send: Send, receive: Receive, fault: Fault | None, closing: threading.Event,
                 gone: asyncio.Event | None = None):
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
            await self._cut(data[:self.after - self.sent], self.kind)
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
                line = rest[:newline + 1] if newline >= 0 else rest
                await self._cut(line[:len(line) // 2], "drop")
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
