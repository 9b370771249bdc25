"""The conformance kit's view of the DeepInfra fake: list sandboxes, find one, disturb it behind the client's back.

The kit speaks a common vocabulary of states; DeepInfra's map onto it:
creating/starting -> creating, running -> running, stopping/stopped ->
paused (compute released, /workspace kept), failed -> error.  ``pause`` is a
stop that happens at once (as the service's idle stop would), ``fail`` breaks
the sandbox, ``delete`` terminates it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from fakes.world_view import BoxWorldView

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

FAULT_ROUTES = {"create": (ROUTE_CREATE,), "exec": (ROUTE_EXEC,), "read": (ROUTE_GET, ROUTE_LIST)}
KIT_STATES = {
    CREATING: "creating",
    STARTING: "creating",
    RUNNING: "running",
    STOPPING: "paused",
    STOPPED: "paused",
    FAILED: "error",
    DELETED: "deleted",
}


class DeepInfraWorld(BoxWorldView):
    vendor = "DeepInfra"

    def __init__(self, service: Service):
        super().__init__(service.world, service.faults, FAULT_ROUTES)
        self.service = service
        self.capabilities = self.capabilities | ({"isolation"} if service.world.isolated else set())

    def sandboxes(self) -> dict[str, str]:
        """Every sandbox that is not deleted, in the kit's state names."""
        return {box.id: KIT_STATES.get(box.state, box.state) for box in self.world.boxes()}

    def states(self) -> dict[str, str]:
        """Every sandbox that is not deleted, in DeepInfra's own state names."""
        return {box.id: box.state for box in self.world.boxes()}

    def nonce_places(self) -> Iterable[tuple[str, Path]]:
        """/workspace, then root's home: checks plant nonces under $HOME, and the reference backend's
        $HOME is /workspace (the only directory that survives a stop), a plain shell's is /root."""
        for box in self.world.boxes():
            yield box.id, box.workspace_dir
            yield box.id, box.home_dir

    def pause(self, sandbox_id: str) -> None:
        """Stopped at once: processes killed, everything but /workspace reset."""
        box = self.box(sandbox_id)
        if box.state == RUNNING:
            self.service.stop(box, immediate=True)

    def fail(self, sandbox_id: str) -> None:
        self.service.fail(self.box(sandbox_id))

    def delete(self, sandbox_id: str) -> None:
        box = self.box(sandbox_id)
        if box.state != DELETED:
            self.service.terminate(box)
