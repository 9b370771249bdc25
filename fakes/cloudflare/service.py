"""The bridge service: what the Worker's routes share (``Bridge``), and ``start`` for a kit run.

``start`` gives HERMES_CF_ENDPOINT and HERMES_CF_TOKEN of a running bridge and its world view.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path

from fakes.faults import Faults
from fakes.services import FakeService
from fakes.world import World

from .settings import EXTENSIONS, TOKEN_VAR, Settings
from .workspace import Workspace


@dataclass
class Bridge:
    """Everything the routes share: settings, the secret, the world, the faults, the workspaces."""

    world: World
    settings: Settings
    token: str | None
    faults: Faults = field(default_factory=Faults)
    closing: threading.Event = field(default_factory=threading.Event)
    workspaces: dict[str, Workspace] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.snapshots_root = self.world.root / ".snapshots"
        self.snapshots_root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def workspace(self, sandbox_id: str) -> Workspace:
        with self._lock:
            found = self.workspaces.get(sandbox_id)
            if found is None:
                found = self.workspaces[sandbox_id] = Workspace(self, sandbox_id)
            return found

    def find(self, sandbox_id: str) -> Workspace | None:
        with self._lock:
            return self.workspaces.get(sandbox_id)

    def all(self) -> list[Workspace]:
        with self._lock:
            return list(self.workspaces.values())

    def close(self) -> None:
        self.closing.set()
        for ws in self.all():
            ws.delete_alarm()
            with contextlib.suppress(Exception):
                ws.destroy()


def start(workdir: Path, *, settings: Settings | None = None, host: str = "127.0.0.1", port: int = 0,
          api_keys: list[str] | None = None) -> FakeService:
    """A running bridge in a fresh world under ``workdir``, with the conformance suite's short intervals
    and every protocol extension offered (pass ``settings`` for a plain v1 Worker); ``api_keys[0]``, if
    given, is the server secret."""
    from .server import BridgeServer  # the server builds a Bridge
    from .world_adapter import CloudflareWorld

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
