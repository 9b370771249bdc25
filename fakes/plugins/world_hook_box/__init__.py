"""world_hook_box: a tempdir_box that lets the kit see and steer its sandboxes, with no fake.

A fixture of the kit's own tests, loaded as a plugin directory.  Its
provider's ``conformance_world`` (conformance/vendor_world.py) lists its
boxes, reads their files and pauses, fails or deletes one, the way a vendor's
own API could for a live run; with it a run without a fake reaches the full
profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class BoxesView:
    """The provider's boxes, as the vendor's control plane would show them."""

    def __init__(self, root: Path) -> None:
        from fakes.tempdir_box.world import TempdirWorld

        self.root = root
        self._world = TempdirWorld(root)

    def sandboxes(self) -> dict[str, str]:
        return self._world.sandboxes()

    def read_file(self, sandbox_id: str, path: str) -> str | None:
        box = (self.root / sandbox_id).resolve()
        target = (box / "home" / path[2:]) if path.startswith("~/") else Path(path)
        try:
            target = target.resolve()
            if not target.is_relative_to(box) or not target.is_file():
                return None  # a path outside the box is no file of it
            return target.read_text("utf-8", "replace")
        except OSError:
            return None

    def pause(self, sandbox_id: str) -> None:
        self._world.pause(sandbox_id)

    def fail(self, sandbox_id: str) -> None:
        self._world.fail(sandbox_id)

    def delete(self, sandbox_id: str) -> None:
        self._world.delete(sandbox_id)


def _provider() -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    class WorldHookBoxProvider(TempdirBoxProvider):
        name = "world_hook_box"

        def conformance_world(self) -> BoxesView:
            return BoxesView(self.box_root())

    return WorldHookBoxProvider()


def register(ctx: Any) -> None:
    from fakes.tempdir_box import register_made

    register_made(ctx, _provider, "world_hook_box")
