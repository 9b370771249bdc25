"""Start the bridge fake for a kit run: HERMES_CF_ENDPOINT and HERMES_CF_TOKEN, and its world."""

from __future__ import annotations

from pathlib import Path

from fakes.services import FakeService

from .server import BridgeServer
from .settings import EXTENSIONS, TOKEN_VAR, Settings
from .world import CloudflareWorld


def start(workdir: Path, *, settings: Settings | None = None, port: int = 0) -> FakeService:
    """A running bridge in a fresh world under ``workdir``, with the conformance suite's short intervals
    and every protocol extension offered (pass ``settings`` for a plain v1 Worker)."""
    root = Path(workdir) / "cloudflare-world"
    settings = settings or Settings.quick(extensions=EXTENSIONS)
    server = BridgeServer(root=root, settings=settings, port=port).start()
    return FakeService(
        name="cloudflare",
        env=server.exports(),
        world=CloudflareWorld(server.bridge),
        secret_vars=frozenset({TOKEN_VAR}),
        credential_var=TOKEN_VAR,
        _stop=server.stop,
    )
