"""The ASGI app: the DeepInfra sandbox API under /v1/sandboxes."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from fakes.faults import Faults
from fakes.world import World

from . import exec_stream, routes_files, routes_sandboxes
from .rest import error
from .service import ApiError, Service
from .settings import Settings

_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def _unknown(request: Request) -> Response:
    """Endpoints the fake does not serve (inference, models, ...): say so, after auth."""
    svc: Service = request.app.state.service
    try:
        svc.authenticate(request.headers)
    except ApiError as exc:
        return error(exc)
    return error(ApiError(404, f"Not Found: {request.method} {request.url.path} is not served by the DeepInfra fake"))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error(ApiError(exc.status_code, str(exc.detail)))


async def _server_error(request: Request, exc: Exception) -> Response:
    return error(ApiError(500, f"internal error in the DeepInfra fake: {type(exc).__name__}: {exc}"))


def create_app(world: World, faults: Faults, api_keys: Iterable[str], settings: Settings | None = None) -> Starlette:
    """An app serving ``world``; only ``api_keys`` are accepted, each its own account."""
    routes = [
        *routes_sandboxes.ROUTES,
        *exec_stream.ROUTES,
        *routes_files.ROUTES,
        Route("/{path:path}", _unknown, methods=_METHODS),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error, Exception: _server_error})
    app.state.service = Service(world, faults, api_keys, settings)
    return app
