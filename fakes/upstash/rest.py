"""What every REST route shares: auth, the fault consulted first, the error body, corrupted replies.

``endpoint(route)`` wraps a handler ``(request, ctx) -> Response``: it checks
``X-Box-Api-Key`` (401), asks ``Faults.take(route, box id)``, applies
``status``/``latency``/``silence`` before the handler and ``drop``/
``truncate``/``half-close``/``garbage`` to the handler's reply afterwards (so
the action happens and only its answer is lost: the "outcome unknown" case).
Streaming routes take ``stream_faults=True`` and apply those kinds themselves.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Send

from fakes.faults import Fault
from fakes.world import DELETED, Box

from .service import Account, ApiError, Service

CORRUPTING = ("drop", "truncate", "half-close", "garbage")


class DroppedConnection(Exception):
    """Raised by a body iterator or a session to cut the connection (a "drop" fault).

    It never reaches the server: ``CuttableStream`` and the session catch it
    and return without finishing the reply, and uvicorn then closes the TCP
    connection (a WebSocket without a close frame).
    """


_unfinished_lock = threading.Lock()
_unfinished = 0  # replies cut on purpose whose "returned without completing" log is still to come


class _HideDrops(logging.Filter):
    """Keep the server's note about a reply cut on purpose out of the error log."""

    def filter(self, record: logging.LogRecord) -> bool:
        global _unfinished
        if str(record.msg).startswith("ASGI callable returned without completing response"):
            with _unfinished_lock:
                if _unfinished > 0:
                    _unfinished -= 1
                    return False
        return True


HIDE_DROPS = _HideDrops()


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


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(400, "request body is not valid JSON")


async def hang(svc: Service, request: Request | None = None) -> None:
    """Never answer: wait until the client goes away or the server shuts down."""
    while not svc.closing.is_set():
        if request is not None and await request.is_disconnected():
            return
        await asyncio.sleep(0.1)


@dataclass
class Context:
    svc: Service
    account: Account
    key: str | None  # the {id} path parameter: a box id or name
    fault: Fault | None

    def box(self) -> Box:
        """The addressed box (a deleted one only when deleted records are visible)."""
        if self.key is None:
            raise ApiError(404, "no box in the path")
        return self.svc.require(self.account, self.key)

    def live_box(self) -> Box:
        """The addressed box, 404 if deleted even when deleted records are visible."""
        box = self.box()
        if box.state == DELETED:
            raise ApiError(404, f"box not found: {self.key}")
        return box


Handler = Callable[[Request, Context], Awaitable[Response]]


def endpoint(route: str, *, stream_faults: bool = False) -> Callable[[Handler], Callable[[Request], Awaitable[Response]]]:
    def wrap(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            svc: Service = request.app.state.service
            try:
                account = svc.authenticate(request.headers)
            except ApiError as exc:
                return error(exc.status, exc.message)
            key = request.path_params.get("id")
            found = svc.find(account, key, include_deleted=True) if key else None
            fault = svc.faults.take(route, found.id if found else key)
            if fault is not None:
                if fault.kind == "status":
                    return error(fault.status, fault.message)
                if fault.kind == "latency":
                    await asyncio.sleep(fault.delay_s)
                elif fault.kind == "silence":
                    await hang(svc, request)
                    return error(503, "silenced")  # nobody is listening any more
            ctx = Context(svc, account, key, fault)
            try:
                response = await handler(request, ctx)
            except ApiError as exc:
                response = error(exc.status, exc.message)
            if fault is not None and fault.kind in CORRUPTING and not stream_faults:
                response = corrupt(response, fault, svc)
            return response

        run.__name__ = handler.__name__
        run.__doc__ = handler.__doc__
        return run

    return wrap


def corrupt(response: Response, fault: Fault, svc: Service) -> Response:
    """Deliver ``response`` damaged the way ``fault`` says."""
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
        await hang(svc)  # half-close: headers (and maybe a prefix) sent, then nothing

    return CuttableStream(damaged(), status_code=response.status_code, headers=headers)
