"""The conformance kit's view of the Upstash fake: list boxes, find one, disturb it behind the client's back."""

from __future__ import annotations

from fakes.fault_script import FaultScript
from fakes.faults import Faults
from fakes.world import ERROR, PAUSED, Box, World

from .service import key_digest
from .settings import WS_ROUTE

CAPABILITIES = frozenset({"world", "world-states", "transport-faults"})
FAULT_ROUTES = {
    "create": ("POST /v2/box",),
    "exec": (WS_ROUTE, "POST /v2/box/{id}/exec", "POST /v2/box/{id}/exec-stream"),
    "read": ("GET /v2/box/{id}", "GET /v2/box/{id}/status", "GET /v2/box"),
}


class UpstashWorld:
    capabilities = CAPABILITIES

    def __init__(self, world: World, faults: Faults | None = None):
        self.world = world
        self.faults = FaultScript(faults or Faults(), FAULT_ROUTES)

    def _box(self, sandbox_id: str) -> Box:
        box = self.world.get(sandbox_id, include_deleted=True)
        if box is None:
            raise KeyError(f"no box {sandbox_id!r} in the Upstash fake")
        return box

    def sandboxes(self) -> dict[str, str]:
        """Every box that is not deleted, with its state (idle, running, paused, error, ...)."""
        return {box.id: self.world.state(box) for box in self.world.boxes()}

    def locate(self, relpath: str, content: str) -> str | None:
        """The box whose $HOME/relpath holds ``content`` (a nonce planted by a check)."""
        for box in self.world.boxes():
            try:
                if (box.home_dir / relpath).read_text("utf-8", "replace").strip() == content:
                    return box.id
            except OSError:
                continue
        return None

    def authenticated_with(self, sandbox_id: str, credential: str) -> bool:
        """Was this credential used against this box (it is the only key that can reach it)?"""
        return key_digest(credential) in self._box(sandbox_id).credentials_seen

    def pause(self, sandbox_id: str) -> None:
        """Paused at once, as by the console or an idle pause: its processes are frozen."""
        self.world.set_state(self._box(sandbox_id), PAUSED)

    def fail(self, sandbox_id: str) -> None:
        self.world.set_state(self._box(sandbox_id), ERROR)

    def delete(self, sandbox_id: str) -> None:
        self.world.delete(self._box(sandbox_id))
