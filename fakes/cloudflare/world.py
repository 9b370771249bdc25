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

from pathlib import Path

from fakes.fault_script import FaultScript

from .protocol import token_digest
from .settings import ROUTE_EXEC, ROUTE_HEALTH, ROUTE_INIT, ROUTE_STATUS
from .workspace import Bridge, Workspace

CAPABILITIES = frozenset({"world", "world-states", "transport-faults"})
FAULT_ROUTES = {"create": (ROUTE_INIT,), "exec": (ROUTE_EXEC,), "read": (ROUTE_STATUS, ROUTE_HEALTH)}


class CloudflareWorld:
    capabilities = CAPABILITIES

    def __init__(self, bridge: Bridge):
        self.bridge = bridge
        self.faults = FaultScript(bridge.faults, FAULT_ROUTES)

    @property
    def paths_note(self) -> str:
        return self.bridge.world.paths_note

    def workspace(self, sandbox_id: str) -> Workspace:
        found = self.bridge.find(sandbox_id)
        if found is None:
            raise KeyError(f"no workspace {sandbox_id!r}")
        return found

    def sandboxes(self) -> dict[str, str]:
        states = {ws.id: ws.world_state() for ws in self.bridge.all()}
        return {sid: state for sid, state in states.items() if state is not None}

    def locate(self, relpath: str, content: str) -> str | None:
        """The workspace whose $HOME/relpath holds ``content`` (live files first, then snapshots)."""
        candidates: list[tuple[str, Path]] = []
        for ws in self.bridge.all():
            box, snapshot = ws.box, ws.snapshot
            if box is not None:
                candidates.insert(0, (ws.id, box.home_dir / relpath))
            if snapshot is not None:
                candidates.append((ws.id, snapshot.path / "home" / relpath))
        for sandbox_id, path in candidates:
            try:
                if path.read_text("utf-8", "replace").strip() == content:
                    return sandbox_id
            except OSError:
                continue
        return None

    def authenticated_with(self, sandbox_id: str, credential: str) -> bool:
        ws = self.bridge.find(sandbox_id)
        return ws is not None and token_digest(credential) in ws.credentials

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
