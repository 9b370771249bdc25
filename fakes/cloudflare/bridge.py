"""The bridge: what the Worker's routes share (settings, the secret, the world, the faults, the workspaces)."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field

from fakes.faults import Faults
from fakes.world import World

from .settings import Settings
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
