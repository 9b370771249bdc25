"""The conformance kit's view of the Upstash fake: list boxes, find one, disturb it behind the client's back."""

from __future__ import annotations

from fakes.faults import Faults
from fakes.world import ERROR, PAUSED, World
from fakes.world_view import BoxWorldView

from .settings import WS_ROUTE

FAULT_ROUTES = {
    "create": ("POST /v2/box",),
    "exec": (WS_ROUTE, "POST /v2/box/{id}/exec", "POST /v2/box/{id}/exec-stream"),
    "read": ("GET /v2/box/{id}", "GET /v2/box/{id}/status", "GET /v2/box"),
}


class UpstashWorld(BoxWorldView):
    vendor = "Upstash"

    def __init__(self, world: World, faults: Faults | None = None):
        super().__init__(world, faults or Faults(), FAULT_ROUTES)
        self.capabilities = self.capabilities | ({"isolation"} if world.isolated else set())

    def sandboxes(self) -> dict[str, str]:
        """Every box that is not deleted, with its state (idle, running, paused, error, ...)."""
        return {box.id: self.world.state(box) for box in self.world.boxes()}

    def pause(self, sandbox_id: str) -> None:
        """Paused at once, as by the console or an idle pause: its processes are frozen."""
        self.world.set_state(self.box(sandbox_id), PAUSED)

    def fail(self, sandbox_id: str) -> None:
        self.world.set_state(self.box(sandbox_id), ERROR)

    def delete(self, sandbox_id: str) -> None:
        self.world.delete(self.box(sandbox_id))
