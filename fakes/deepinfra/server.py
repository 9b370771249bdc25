"""Run the DeepInfra fake under uvicorn on loopback, in a background thread."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from pathlib import Path

from fakes.delivery import HIDE_DROPS
from fakes.faults import Faults
from fakes.serving import FakeServer, LoopbackServer
from fakes.world import World

from .app import create_app
from .service import Service
from .settings import KEY_VAR, LAYOUT, SANDBOX_URL_VAR, URL_VAR, Settings


class DeepInfraServer(FakeServer):
    """The fake on ``host``:``port`` (0 = an ephemeral port); ``start()`` returns once it accepts connections.

    Without ``world`` it makes its own (DeepInfra's layout: HOME /root,
    /workspace) under ``root`` and removes it on ``stop()``.  ``api_keys``
    are the accepted keys, each its own account; by default one random key.
    """

    log_filters = (HIDE_DROPS,)

    def __init__(
        self,
        *,
        world: World | None = None,
        root: Path | None = None,
        faults: Faults | None = None,
        api_keys: Sequence[str] | None = None,
        settings: Settings | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        namespaces: bool | None = None,
    ):
        self._owns_world = world is None
        self.world = world or World(root, layout=LAYOUT, namespaces=namespaces)
        self.faults = faults or Faults()
        self.api_keys = list(api_keys) if api_keys else ["di_fake_" + secrets.token_hex(16)]
        self.api_key = self.api_keys[0]
        self.settings = settings or Settings()
        self.app = create_app(self.world, self.faults, self.api_keys, self.settings)
        self._loop = LoopbackServer(self.app, host=host, port=port, name="deepinfra", ws="none")

    @property
    def service(self) -> Service:
        return self.app.state.service

    @property
    def paths_note(self) -> str:
        note = self.world.paths_note
        if not self.world.namespaced:
            note += "; commands do not see /workspace, so DeepInfra clients that rely on it will not work"
        return note

    def exports(self) -> dict[str, str]:
        """The variables that point the deepinfra SDK (and its plugins) and the reference backend at this fake."""
        return {URL_VAR: self.base_url, SANDBOX_URL_VAR: self.base_url, KEY_VAR: self.api_key}

    def _close_service(self) -> None:
        self.service.closing.set()
        self.world.kill_all()
