"""The ASGI app: the DeepInfra sandbox API under /v1/sandboxes."""

from __future__ import annotations

from collections.abc import Iterable

from starlette.applications import Starlette

from fakes import rest_skeleton
from fakes.faults import Faults
from fakes.world import World

from . import exec_stream, routes_files, routes_sandboxes
from .service import Service
from .settings import Settings


def create_app(world: World, faults: Faults, api_keys: Iterable[str], settings: Settings | None = None) -> Starlette:
    """An app serving ``world``; only ``api_keys`` are accepted, each its own account.

    Endpoints the fake does not serve (inference, models, ...) answer 404 saying so, after auth.
    """
    routes = [*routes_sandboxes.ROUTES, *exec_stream.ROUTES, *routes_files.ROUTES]
    return rest_skeleton.create_app(Service(world, faults, api_keys, settings), routes)
