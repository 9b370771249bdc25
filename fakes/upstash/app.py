"""The ASGI app: the Upstash Box REST API and the exec-session WebSocket on one port."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from fakes.faults import Faults
from fakes.world import World

from . import routes_boxes, routes_exec, routes_files
from .rest import error
from .service import ApiError, Service
from .session import exec_session
from .settings import Settings

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def _unknown(request: Request) -> Response:
    """Endpoints the fake does not serve (agent runs, snapshots, git, browser, ...): say so."""
    svc: Service = request.app.state.service
    try:
        svc.authenticate(request.headers)
    except ApiError as exc:
        return error(exc.status, exc.message)
    return error(404, f"not found: {request.method} {request.url.path} is not served by the Upstash Box fake")


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error(exc.status_code, str(exc.detail))


async def _server_error(request: Request, exc: Exception) -> Response:
    return error(500, f"internal error in the Upstash Box fake: {type(exc).__name__}: {exc}")


def create_app(world: World, faults: Faults, api_keys: Iterable[str], settings: Settings | None = None) -> Starlette:
    """An app serving ``world``; only ``api_keys`` are accepted, each its own account."""
    routes = [
        *routes_boxes.ROUTES,
        *routes_exec.ROUTES,
        *routes_files.ROUTES,
        WebSocketRoute("/v2/box/{id}/exec-session", exec_session),
        Route("/{path:path}", _unknown, methods=_METHODS),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _server_error})
    app.state.service = Service(world, faults, api_keys, settings)
    return app
