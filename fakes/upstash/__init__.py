"""A local Upstash Box service: the REST API and the exec-session WebSocket of upstash-box 0.4.

Boxes are directories of the shared World (fakes/world.py).  The real
``upstash_box`` SDK, sync and async, works against it unchanged: point
``UPSTASH_BOX_BASE_URL`` at ``UpstashServer.base_url`` and use its
``api_key``.  Choices where the real service is unknown are in settings.py;
fault route names are ``settings.ROUTES``.
"""

from __future__ import annotations

from fakes.keys import key_digest
from fakes.rest_skeleton import ApiError

from .app import create_app
from .server import UpstashServer
from .service import Service
from .settings import ROUTES, WS_ROUTE, Settings
from .world_adapter import UpstashWorld

__all__ = [
    "ROUTES",
    "WS_ROUTE",
    "ApiError",
    "Service",
    "Settings",
    "UpstashServer",
    "UpstashWorld",
    "create_app",
    "key_digest",
]
