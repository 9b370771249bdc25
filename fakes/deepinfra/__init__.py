"""A local DeepInfra sandbox API (deep_sands): /v1/sandboxes as the deepinfra 0.3 SDK uses it.

Sandboxes are boxes of the shared World (fakes/world.py) laid out as
DeepInfra's: HOME /root and the persistent /workspace, in private mount
namespaces.  The real ``deepinfra`` SDK works against it unchanged: point
``DEEPINFRA_BASE_URL`` at ``DeepInfraServer.base_url`` and use its
``api_key``.  Choices where the real service is unknown are in settings.py;
fault route names are ``settings.ROUTES``.
"""

from __future__ import annotations

from .app import create_app
from .server import DeepInfraServer
from .service import ApiError, Service
from .settings import LAYOUT, ROUTES, Settings
from .world_adapter import DeepInfraWorld

__all__ = ["LAYOUT", "ROUTES", "ApiError", "DeepInfraServer", "DeepInfraWorld", "Service", "Settings", "create_app"]
