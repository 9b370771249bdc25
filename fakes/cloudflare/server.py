"""Run the bridge on loopback: uvicorn on 127.0.0.1 in a background thread.

``BridgeServer`` also has the shape ``hermes-backend-kit fake serve`` expects of
a fake server class: ``(host=, port=, api_keys=)``, ``start()``, ``stop()``,
``exports()`` and ``paths_note``.
"""

from __future__ import annotations

import enum
import secrets
from pathlib import Path
from typing import Literal

from fakes.delivery import HIDE_DROPS
from fakes.faults import Faults
from fakes.serving import FakeServer, LoopbackServer
from fakes.world import PathLayout, World

from .app import create_app
from .bridge import Bridge
from .settings import ENDPOINT_VAR, TOKEN_VAR, Settings

# The container of the public repository: user hermes, HOME /home/hermes,
# WORKDIR /workspace (worker/container/Dockerfile).
LAYOUT = PathLayout(home="/home/hermes", workspace="/workspace", user="hermes")


class _Token(enum.Enum):
    GENERATE = enum.auto()  # the default: a fresh token


_GENERATE = _Token.GENERATE


class BridgeServer(FakeServer):
    """A bridge protocol v1 service with its own box world.

    ``token`` is the server secret (SANDBOX_API_TOKEN); by default a fresh
    64-character one (``api_keys[0]`` is another way to pass it).  Pass None,
    or change ``bridge.token`` later, to see ``not_configured``.  Timings
    default to the public Worker's; see ``Settings.quick()``.
    """

    log_filters = (HIDE_DROPS,)

    def __init__(
        self,
        *,
        token: str | Literal[_Token.GENERATE] | None = _GENERATE,
        settings: Settings | None = None,
        world: World | None = None,
        root: Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        namespaces: bool | None = None,
        api_keys: list[str] | None = None,
    ):
        if api_keys:
            token = api_keys[0]
        self.token: str | None = secrets.token_urlsafe(48) if token is _GENERATE else token
        self._owns_world = world is None
        self.world = world or World(root, layout=LAYOUT, namespaces=namespaces)
        self.faults = Faults()
        self.bridge = Bridge(self.world, settings or Settings(), self.token, self.faults)
        self.app = create_app(self.bridge)
        self._loop = LoopbackServer(self.app, host=host, port=port, name="cloudflare", ws="none", timeout_keep_alive=30)

    @property
    def settings(self) -> Settings:
        return self.bridge.settings

    def exports(self) -> dict[str, str]:
        """The plugin's variables for this server."""
        return {ENDPOINT_VAR: self.base_url, TOKEN_VAR: self.token or ""}

    def _close_service(self) -> None:
        self.bridge.close()
