"""Run the Upstash Box fake under uvicorn on loopback, in a background thread."""

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
from .settings import Settings


class UpstashServer(FakeServer):
    """The fake on ``host``:``port`` (0 = an ephemeral port); ``start()`` returns once it accepts connections.

    Without ``world`` it makes its own under ``root`` (a temp dir by default)
    and removes it on ``stop()``; a given world is left in place, but its box
    processes are killed either way.
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
        create_delay_s: float = 0.0,
        pause_delay_s: float = 0.0,
        resume_delay_s: float = 0.0,
        namespaces: bool | None = None,
    ):
        self._owns_world = world is None
        self.world = world or World(
            root,
            create_delay_s=create_delay_s,
            pause_delay_s=pause_delay_s,
            resume_delay_s=resume_delay_s,
            namespaces=namespaces,
        )
        self.faults = faults or Faults()
        self.api_keys = list(api_keys) if api_keys else ["ubx_fake_" + secrets.token_hex(16)]
        self.api_key = self.api_keys[0]
        self.settings = settings or Settings()
        self.app = create_app(self.world, self.faults, self.api_keys, self.settings)
        self.host = host
        s = self.settings
        self._loop = LoopbackServer(
            self.app,
            host=host,
            port=port,
            name="upstash",
            ws="websockets-sansio",
            ws_per_message_deflate=False,
            ws_max_size=s.ws_max_message_bytes,
            ws_ping_interval=s.ws_ping_interval_s,
            ws_ping_timeout=None,
        )

    @property
    def service(self) -> Service:
        return self.app.state.service

    def exports(self) -> dict[str, str]:
        """The variables that point the SDK (and hermes-box) at this fake."""
        return {
            "UPSTASH_BOX_BASE_URL": self.base_url,
            "UPSTASH_BOX_API_KEY": self.api_key,
            "UPSTASH_DISABLE_TELEMETRY": "1",
        }

    def _close_service(self) -> None:
        self.service.closing.set()
        self.world.kill_all()
