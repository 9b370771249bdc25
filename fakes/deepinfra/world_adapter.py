"""The conformance kit's view of the DeepInfra fake: list sandboxes, find one, disturb it behind the client's back.

The kit speaks a common vocabulary of states; DeepInfra's map onto it:
creating/starting -> creating, running -> running, stopping/stopped ->
paused (compute released, /workspace kept), failed -> error.  ``pause`` is a
stop that happens at once (as the service's idle stop would), ``fail`` breaks
the sandbox, ``delete`` terminates it.
"""

from __future__ import annotations

from fakes.fault_script import FaultScript
from fakes.upstash.service import key_digest
from fakes.world import Box

from .service import Service
from .settings import (
    CREATING,
    DELETED,
    FAILED,
    ROUTE_CREATE,
    ROUTE_EXEC,
    ROUTE_GET,
    ROUTE_LIST,
    RUNNING,
    STARTING,
    STOPPED,
    STOPPING,
)

CAPABILITIES = frozenset({"world", "world-states", "transport-faults"})
FAULT_ROUTES = {"create": (ROUTE_CREATE,), "exec": (ROUTE_EXEC,), "read": (ROUTE_GET, ROUTE_LIST)}
KIT_STATES = {CREATING: "creating", STARTING: "creating", RUNNING: "running", STOPPING: "paused",
              STOPPED: "paused", FAILED: "error", DELETED: "deleted"}


class DeepInfraWorld:
    capabilities = CAPABILITIES

    def __init__(self, service: Service):
        self.service = service
        self.world = service.world
        self.faults = FaultScript(service.faults, FAULT_ROUTES)

    def _box(self, sandbox_id: str) -> Box:
        box = self.world.get(sandbox_id, include_deleted=True)
        if box is None:
            raise KeyError(f"no sandbox {sandbox_id!r} in the DeepInfra fake")
        return box

    def sandboxes(self) -> dict[str, str]:
        """Every sandbox that is not deleted, in the kit's state names."""
        return {box.id: KIT_STATES.get(box.state, box.state) for box in self.world.boxes()}

    def states(self) -> dict[str, str]:
        """Every sandbox that is not deleted, in DeepInfra's own state names."""
        return {box.id: box.state for box in self.world.boxes()}

    def locate(self, relpath: str, content: str) -> str | None:
        """The sandbox holding ``content`` at ``relpath`` under /workspace or under root's home.

        Checks plant nonces under $HOME; the reference backend's $HOME is
        /workspace (the only directory that survives a stop), a plain shell's is /root.
        """
        for box in self.world.boxes():
            for base in (box.workspace_dir, box.home_dir):
                try:
                    if (base / relpath).read_text("utf-8", "replace").strip() == content:
                        return box.id
                except OSError:
                    continue
        return None

    def authenticated_with(self, sandbox_id: str, credential: str) -> bool:
        """Was this credential used against this sandbox (it is the only key that can reach it)?"""
        return key_digest(credential) in self._box(sandbox_id).credentials_seen

    def pause(self, sandbox_id: str) -> None:
        """Stopped at once: processes killed, everything but /workspace reset."""
        box = self._box(sandbox_id)
        if box.state == RUNNING:
            self.service.stop(box, immediate=True)

    def fail(self, sandbox_id: str) -> None:
        self.service.fail(self._box(sandbox_id))

    def delete(self, sandbox_id: str) -> None:
        box = self._box(sandbox_id)
        if box.state != DELETED:
            self.service.terminate(box)
