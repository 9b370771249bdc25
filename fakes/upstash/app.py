"""The ASGI app: the Upstash Box REST API and the exec-session WebSocket on one port."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.applications import Starlette
from starlette.routing import WebSocketRoute

from fakes import rest_skeleton
from fakes.faults import Faults
from fakes.world import World

from . import routes_boxes, routes_exec, routes_files
from .service import Service
from .session import exec_session
from .settings import Settings


def create_app(world: World, faults: Faults, api_keys: Iterable[str], settings: Settings | None = None) -> Starlette:
    """An app serving ``world``; only ``api_keys`` are accepted, each its own account.

    Endpoints the fake does not serve (agent runs, snapshots, git, browser, ...) answer 404 saying so.
    """
    routes = [
        *routes_boxes.ROUTES,
        *routes_exec.ROUTES,
        *routes_files.ROUTES,
        WebSocketRoute("/v2/box/{id}/exec-session", exec_session),
    ]
    return rest_skeleton.create_app(Service(world, faults, api_keys, settings), routes)
