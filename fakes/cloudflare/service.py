"""``start``: a running bridge for a kit run, HERMES_CF_ENDPOINT and HERMES_CF_TOKEN, and its world view."""

from __future__ import annotations

from pathlib import Path

from fakes.fake_service import FakeService

from .server import BridgeServer
from .settings import EXTENSIONS, TOKEN_VAR, Settings
from .world_adapter import CloudflareWorld


def start(
    workdir: Path,
    *,
    settings: Settings | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    api_keys: list[str] | None = None,
) -> FakeService:
    """A running bridge in a fresh world under ``workdir``, with the conformance suite's short intervals
    and every protocol extension offered (pass ``settings`` for a plain v1 Worker); ``api_keys[0]``, if
    given, is the server secret."""
    root = Path(workdir) / "cloudflare-world"
    settings = settings or Settings.quick(extensions=EXTENSIONS)
    server = BridgeServer(root=root, settings=settings, host=host, port=port, api_keys=api_keys).start()
    return FakeService(
        name="cloudflare",
        env=server.exports(),
        world=CloudflareWorld(server.bridge),
        secret_vars=frozenset({TOKEN_VAR}),
        credential_var=TOKEN_VAR,
        _stop=server.stop,
    )
