"""The harness's view of bridge workspaces: list them, find one, disturb it.

States: ``running`` (container up), ``idle`` (configured, never booted: no
compute), ``paused`` (stopped with a snapshot; the next command restores it),
``error`` (booted, stopped, no snapshot: ``workspace_lost``), ``deleted``
(configured once, then all state forgotten by release or DELETE).

Mapping of the harness verbs: ``pause`` = snapshot and stop the container (what
the idle alarm does); ``fail`` = the container is lost and no snapshot exists;
``delete`` = container and all Durable Object state gone, as after DELETE.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from pathlib import Path

from fakes.world_view import WorldView

from .bridge import Bridge
from .settings import ROUTE_EXEC, ROUTE_HEALTH, ROUTE_INIT, ROUTE_STATUS
from .workspace import Workspace

FAULT_ROUTES = {"create": (ROUTE_INIT,), "exec": (ROUTE_EXEC,), "read": (ROUTE_STATUS, ROUTE_HEALTH)}


class CloudflareWorld(WorldView):
    vendor = "Cloudflare bridge"

    def __init__(self, bridge: Bridge):
        super().__init__(bridge.faults, FAULT_ROUTES)
        self.bridge = bridge
        self.capabilities = self.capabilities | ({"isolation"} if bridge.world.isolated else set())

    @property
    def paths_note(self) -> str:
        return self.bridge.world.paths_note

    def workspace(self, sandbox_id: str) -> Workspace:
        found = self.bridge.find(sandbox_id)
        if found is None:
            raise KeyError(f"no workspace {sandbox_id!r} in the {self.vendor} fake")
        return found

    def sandboxes(self) -> dict[str, str]:
        states = {ws.id: ws.world_state() for ws in self.bridge.all()}
        return {sid: state for sid, state in states.items() if state is not None}

    def nonce_places(self) -> Iterable[tuple[str, Path]]:
        """Live homes first, then the homes kept in snapshots."""
        snapshots: list[tuple[str, Path]] = []
        for ws in self.bridge.all():
            box, snapshot = ws.box, ws.snapshot
            if box is not None:
                yield ws.id, box.home_dir
            if snapshot is not None:
                snapshots.append((ws.id, snapshot.path / "home"))
        yield from snapshots

    def record_places(self) -> Iterable[tuple[str, Path]]:
        """Each live container's home and workspace (/workspace, the directory the backend keeps)."""
        for ws in self.bridge.all():
            if ws.box is not None:
                yield ws.id, ws.box.home_dir
                yield ws.id, ws.box.workspace_dir

    def credentials(self, sandbox_id: str) -> Collection[str]:
        ws = self.bridge.find(sandbox_id)
        return ws.credentials if ws is not None else ()

    def pause(self, sandbox_id: str) -> None:
        self.workspace(sandbox_id).pause()

    def fail(self, sandbox_id: str) -> None:
        self.workspace(sandbox_id).lose()

    def delete(self, sandbox_id: str) -> None:
        self.workspace(sandbox_id).forget()

    # -- beyond the common world: finer Cloudflare disturbances -----------------------------
    def crash(self, sandbox_id: str) -> None:
        """The container dies; with a snapshot the next command restores it, without one it is lost."""
        self.workspace(sandbox_id).crash()

    def idle_now(self, sandbox_id: str) -> None:
        """Run the idle alarm now, as if the workspace had been idle for IDLE_SECONDS."""
        ws = self.workspace(sandbox_id)
        with ws.lock:
            ws.last_activity -= ws.settings.idle_s
        ws.alarm()
