"""What every route shares: bearer auth, the scripted fault consulted first, the error bodies.

``endpoint(route)`` wraps a handler ``(request, ctx) -> Response``: it checks
the bearer token (401), asks ``Faults.take(route, sandbox id)``, applies
``status``/``latency``/``silence`` before the handler and the corrupting kinds
(``drop``, ``truncate``, ``half-close``, ``garbage``) to the handler's reply
afterwards, so the action happens and only its answer is lost: the "outcome
unknown" case a client must survive (a create whose reply never arrives).
The exec stream applies those kinds itself, line by line.

A ``status`` fault with 502, 503 or 504 on a GET is retried by the SDK; the
same fault on a POST, PUT or DELETE is not (deepinfra/clients/deepinfra.py).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from fakes.faults import Fault
from fakes.upstash.rest import CORRUPTING, corrupt, hang
from fakes.world import Box

from .service import Account, ApiError, Service


def error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


async def json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(422, "request body is not valid JSON")


@dataclass
class Context:
    svc: Service
    account: Account
    sandbox_id: str | None
    fault: Fault | None

    def sandbox(self) -> Box:
        if self.sandbox_id is None:
            raise ApiError(404, "Sandbox not found")
        return self.svc.require(self.account, self.sandbox_id)


Handler = Callable[[Request, Context], Awaitable[Response]]


def endpoint(route: str, *, stream_faults: bool = False) -> Callable[[Handler], Callable[[Request], Awaitable[Response]]]:
    def wrap(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def run(request: Request) -> Response:
            svc: Service = request.app.state.service
            try:
                account = svc.authenticate(request.headers)
            except ApiError as exc:
                return error(exc)
            sandbox_id = request.path_params.get("id")
            fault = svc.faults.take(route, sandbox_id)
            if fault is not None:
                if fault.kind == "status":
                    return error(ApiError(fault.status, fault.message, svc.settings.fault_error_shape))
                if fault.kind == "latency":
                    await asyncio.sleep(fault.delay_s)
                elif fault.kind == "silence":
                    await hang(svc, request)  # type: ignore[arg-type]
                    return error(ApiError(503, "silenced"))  # nobody is listening any more
            ctx = Context(svc, account, sandbox_id, fault)
            try:
                response = await handler(request, ctx)
            except ApiError as exc:
                response = error(exc)
            if fault is not None and fault.kind in CORRUPTING and not stream_faults:
                response = corrupt(response, fault, svc)  # type: ignore[arg-type]
            return response

        run.__name__ = handler.__name__
        run.__doc__ = handler.__doc__
        return run

    return wrap
