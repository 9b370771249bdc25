"""The harness's view of temp-dir boxes: list them, find one, disturb it."""

from __future__ import annotations

from pathlib import Path

from fakes.world_view import find_records

from .boxes import Box, list_boxes, owner_digest

CAPABILITIES = frozenset({"world", "world-states"})


class TempdirWorld:
    capabilities = CAPABILITIES

    def __init__(self, root: Path):
        self.root = Path(root)

    def sandboxes(self) -> dict[str, str]:
        return {box.id: box.state() for box in list_boxes(self.root)}

    def locate(self, relpath: str, content: str) -> str | None:
        """The box whose $HOME/relpath holds ``content`` (a nonce planted by a check)."""
        for box in list_boxes(self.root):
            try:
                if (box.home / relpath).read_text("utf-8", "replace").strip() == content:
                    return box.id
            except OSError:
                continue
        return None

    def find_record(self, name: str, near: str | None = None) -> dict[str, str]:
        """Box id -> the text of a check's record file ``name`` under the box's $HOME (its cwd)."""
        return find_records(((box.id, box.home) for box in list_boxes(self.root)), name)

    def authenticated_with(self, sandbox_id: str, credential: str) -> bool:
        """Was the box created with this credential?"""
        return Box(self.root / sandbox_id).meta().get("owner") == owner_digest(credential)

    def pause(self, sandbox_id: str) -> None:
        Box(self.root / sandbox_id).write_meta(state="paused")

    def fail(self, sandbox_id: str) -> None:
        Box(self.root / sandbox_id).write_meta(state="error")

    def delete(self, sandbox_id: str) -> None:
        Box(self.root / sandbox_id).delete()
