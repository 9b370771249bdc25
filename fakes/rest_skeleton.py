"""The request skeleton of the vendor fakes' REST routes, and the account service under them.

``endpoint(route)`` wraps a handler ``(request, ctx) -> Response``:

1. auth: ``svc.authenticate(headers)`` (the vendor's 401);
2. the scripted fault: ``Faults.take(route, svc.fault_box(account, key))``;
3. ``status`` answers with the vendor's error body, ``latency`` waits,
   ``silence`` waits until the client goes away (the handler never runs);
4. the handler; an ``ApiError`` becomes the vendor's error body, bad input
   (``fakes.bodies.BadInput``: JSON that does not parse or nests too deeply, a
   NUL byte) the vendor's 400 naming the problem;
5. ``drop``/``truncate``/``half-close``/``garbage`` damage the handler's reply
   (``fakes.delivery.corrupt``), so the action happens and only its answer is
   lost: the "outcome unknown" case a client must survive.  Streaming routes
   (``stream_faults=True``) apply those kinds themselves.

``VendorService`` holds what every vendor's service shares (the world, the
faults, the settings, the accepted keys, the shutdown flag) and says how a
vendor presents its key and shapes its errors; ``create_app`` serves a
vendor's routes with a catch-all that names what the fake does not serve.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from fakes import bodies
from fakes.delivery import CORRUPTING, corrupt, hang
from fakes.faults import Fault, Faults
from fakes.keys import Account, KeyRing
from fakes.world import Box, World

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
DRAIN_MAX_BYTES = 1 << 31  # an oversized body is read on (and dropped) up to this, so the client sees the 413


def size_text(n: int) -> str:
    """``n`` bytes as people say it: 100 MiB, 1 GiB, 1500 bytes."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"


class ApiError(Exception):
    """An error reply: an HTTP status and a message; a vendor's subclass may shape the body its own way."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"error": self.message}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status)


@dataclass
class Context:
    """What a handler gets besides the request: the service, the caller's account, the path's id, the fault."""

    svc: Any
    account: Account
    key: str | None  # the {id} path parameter
    fault: Fault | None

    def box(self) -> Box:
        """The box the path's {id} names, found the vendor's way (``svc.require``: 404 if the account has none)."""
        if self.key is None:
            raise self.svc.error(404, self.svc.no_box_in_path)
        return self.svc.require(self.account, self.key)


class VendorService:
    """The part of a vendor fake's service every vendor shares; subclasses speak the vendor's protocol."""

    vendor: ClassVar[str] = "vendor"  # as messages name the fake: "the <vendor> fake"
    missing_key: ClassVar[str] = "missing API key"
    invalid_key: ClassVar[str] = "invalid API key"
    no_box_in_path: ClassVar[str] = "no sandbox in the path"
    context_type: ClassVar[type[Context]] = Context

    def __init__(self, world: World, faults: Faults, api_keys: Iterable[str], settings: Any):
        self.world = world
        self.faults = faults
        self.settings = settings
        self.keys = KeyRing(api_keys, self.vendor)
        self.closing = threading.Event()  # set on shutdown; silenced requests return

    # -- what a vendor says ------------------------------------------------------------
    def presented_key(self, headers: Mapping[str, str]) -> str | None:
        """The key the request carries, as the vendor's clients send it."""
        raise NotImplementedError

    def error(self, status: int, message: str) -> ApiError:
        """An error in the vendor's body shape."""
        return ApiError(status, message)

    def fault_error(self, fault: Fault) -> ApiError:
        """The reply to a scripted ``status`` fault."""
        return self.error(fault.status, fault.message)

    def require(self, account: Account, key: str) -> Box:
        """The account's box that ``key`` names, or the vendor's 404."""
        raise NotImplementedError

    def fault_box(self, account: Account, key: str | None) -> str | None:
        """The box id a fault may target, from the path's id (which may be a name)."""
        return key

    # -- shared --------------------------------------------------------------------------
    def too_large(self, what: str, size: int, limit: int) -> ApiError:
        return self.error(413, f"{what} of {size} bytes exceeds the limit of {limit} bytes ({size_text(limit)})")

    async def bounded_stream(self, request: Request, limit: int, what: str) -> AsyncIterator[bytes]:
        """The request body in chunks as they arrive; 413 (after reading on, so the client sees it) once it
        is, or says it is, longer than ``limit``."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await _discard(request)
            raise self.too_large(what, int(declared), limit)
        size = 0
        stream = request.stream()
        async for chunk in stream:
            size += len(chunk)
            if size > limit:
                async for rest in stream:  # read on, and drop it
                    size += len(rest)
                    if size > limit + DRAIN_MAX_BYTES:
                        break
                raise self.too_large(what, size, limit)
            yield chunk

    async def json_body(self, request: Request) -> Any:
        """The request's JSON body ({} when empty), within the vendor's ``settings.max_json_bytes`` (413) and
        ``settings.max_json_depth`` (400)."""
        raw = bytearray()
        async for chunk in self.bounded_stream(request, self.settings.max_json_bytes, "a JSON request body"):
            raw += chunk
        if not raw:
            return {}
        return bodies.parse_json(bytes(raw), max_depth=self.settings.max_json_depth)

    def add_key(self, key: str) -> None:
        """Accept another key: a separate account with its own boxes and limits."""
        self.keys.add(key)

    def authenticate(self, headers: Mapping[str, str]) -> Account:
        key = self.presented_key(headers)
        if not key:
            raise self.error(401, self.missing_key)
        account = self.keys.account(key)
        if account is None:
            raise self.error(401, self.invalid_key)
        return account


async def _discard(request: Request) -> int:
    """Read the rest of the body and drop it (at most DRAIN_MAX_BYTES)."""
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > DRAIN_MAX_BYTES:
            break
    return size


Handler = Callable[[Request, Any], Awaitable[Any]]


def endpoint(route: str, *, stream_faults: bool = False) -> Callable[[Handler], Callable[[Request], Awaitable[Any]]]:
    """Wrap ``handler`` in the skeleton; ``route`` is the fault route name (the vendor's settings.ROUTES)."""

    def wrap(handler: Handler) -> Callable[[Request], Awaitable[Any]]:
        async def run(request: Request) -> Any:
            svc: VendorService = request.app.state.service
            try:
                account = svc.authenticate(request.headers)
            except ApiError as exc:
                return exc.response()
            key = request.path_params.get("id")
            fault = svc.faults.take(route, svc.fault_box(account, key))
            if fault is not None:
                if fault.kind == "status":
                    return svc.fault_error(fault).response()
                if fault.kind == "latency":
                    await asyncio.sleep(fault.delay_s)
                elif fault.kind == "silence":
                    await hang(svc.closing, request)
                    return svc.error(503, "silenced").response()  # nobody is listening any more
            ctx = svc.context_type(svc, account, key, fault)
            try:
                response = await handler(request, ctx)
            except ApiError as exc:
                response = exc.response()
            except bodies.BadInput as exc:
                response = svc.error(400, str(exc)).response()
            if fault is not None and fault.kind in CORRUPTING and not stream_faults:
                response = corrupt(response, fault, svc.closing)
            return response

        run.__name__ = handler.__name__
        run.__doc__ = handler.__doc__
        return run

    return wrap


def create_app(service: VendorService, routes: Sequence[BaseRoute]) -> Starlette:
    """An app serving a vendor's ``routes``; any other path answers (after auth) that the fake does not serve it."""

    async def unknown(request: Request) -> Response:
        try:
            service.authenticate(request.headers)
        except ApiError as exc:
            return exc.response()
        return service.error(
            404, f"not found: {request.method} {request.url.path} is not served by the {service.vendor} fake"
        ).response()

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return service.error(exc.status_code, str(exc.detail)).response()

    async def server_error(request: Request, exc: Exception) -> Response:
        return service.error(
            500, f"internal error in the {service.vendor} fake: {type(exc).__name__}: {exc}"
        ).response()

    app = Starlette(
        routes=[*routes, Route("/{path:path}", unknown, methods=_METHODS)],
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
    app.state.service = service
    return app
