"""Run the Upstash Box fake under uvicorn on loopback, in a background thread."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from fakes.faults import Faults
from fakes.serving import LoopbackServer
from fakes.world import World

from .app import create_app
from .rest import HIDE_DROPS
from .service import Service
from .settings import Settings


def _quiet_logs() -> None:
    """No request logs and no handshake headers (they carry the API key) at any root level."""
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
    error_log = logging.getLogger("uvicorn.error")
    if HIDE_DROPS not in error_log.filters:
        error_log.addFilter(HIDE_DROPS)


class UpstashServer:
    """The fake on ``host``:``port`` (0 = an ephemeral port); ``start()`` returns once it accepts connections.

    Without ``world`` it makes its own under ``root`` (a temp dir by default)
    and removes it on ``stop()``; a given world is left in place, but its box
    processes are killed either way.
    """

    def __init__(self, *, world: World | None = None, root: Path | None = None, faults: Faults | None = None,
                 api_keys: Sequence[str] | None = None, settings: Settings | None = None,
                 host: str = "127.0.0.1", port: int = 0, create_delay_s: float = 0.0,
                 pause_delay_s: float = 0.0, resume_delay_s: float = 0.0, namespaces: bool | None = None):
        self._own_world = world is None
        self.world = world or World(root, create_delay_s=create_delay_s, pause_delay_s=pause_delay_s,
                                    resume_delay_s=resume_delay_s, namespaces=namespaces)
        self.faults = faults or Faults()
        self.api_keys = list(api_keys) if api_keys else ["ubx_fake_" + secrets.token_hex(16)]
        self.api_key = self.api_keys[0]
        self.settings = settings or Settings()
        self.app = create_app(self.world, self.faults, self.api_keys, self.settings)
        self.host = host
        s = self.settings
        self._loop = LoopbackServer(
            self.app, host=host, port=port, name="upstash", ws="websockets-sansio", ws_per_message_deflate=False,
            ws_max_size=s.ws_max_message_bytes, ws_ping_interval=s.ws_ping_interval_s, ws_ping_timeout=None,
        )

    @property
    def service(self) -> Service:
        return self.app.state.service  # type: ignore[no-any-return]

    @property
    def base_url(self) -> str:
        return self._loop.base_url

    @property
    def port(self) -> int:
        return self._loop.port

    @property
    def paths_note(self) -> str:
        return self.world.paths_note

    def exports(self) -> dict[str, str]:
        """The variables that point the SDK (and hermes-box) at this fake."""
        return {"UPSTASH_BOX_BASE_URL": self.base_url, "UPSTASH_BOX_API_KEY": self.api_key,
                "UPSTASH_DISABLE_TELEMETRY": "1"}

    def start(self, timeout: float = 15.0) -> UpstashServer:
        _quiet_logs()
        self._loop.start(timeout)
        return self

    def stop(self) -> None:
        self.service.closing.set()
        self.world.kill_all()
        self._loop.stop()
        if self._own_world:
            self.world.close()

    def __enter__(self) -> UpstashServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
