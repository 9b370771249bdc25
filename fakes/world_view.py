"""The one interface through which the kit's checks inspect and steer any fake's sandboxes.

A world view lists the fake's sandboxes with their states in the kit's words
(creating, idle, running, paused, error, deleted), finds the sandbox holding a
nonce a check planted in its $HOME, tells whether a credential reached a
sandbox, and disturbs a sandbox behind its client's back (``pause``,
``fail``, ``delete``); ``faults`` arms transport faults by role
(fakes/fault_script.py).  Each vendor's ``world_adapter.py`` says how its own
states and lifecycle map onto these.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import ClassVar

from fakes import boxfs
from fakes.fault_script import FaultScript
from fakes.faults import Faults
from fakes.keys import key_digest
from fakes.world import Box, World

CAPABILITIES = frozenset({"world", "world-states", "transport-faults"})
RECORD_DEPTH = 4  # how deep under a sandbox's places a check's record file is looked for
RECORD_LIMIT = 1 << 16


def find_records(places: Iterable[tuple[str, Path]], name: str) -> dict[str, str]:
    """Sandbox id -> the text of the regular file called ``name`` found under its places.

    A check names its record with a nonce, so a name found anywhere within
    RECORD_DEPTH levels is the check's own.  The walk never follows a symlink
    and a file is opened without following one and without blocking (a box's
    FIFO of that name is skipped), so a sandbox's contents cannot lead the kit
    out of it or make it wait.
    """
    found: dict[str, str] = {}
    for sandbox_id, base in places:
        if sandbox_id in found:
            continue
        base_depth = len(base.parts)
        for folder, dirs, files in os.walk(base, followlinks=False):
            if len(Path(folder).parts) - base_depth >= RECORD_DEPTH:
                dirs[:] = []
            if name not in files:
                continue
            text = _read_regular(Path(folder) / name)
            if text is not None:
                found[sandbox_id] = text
                break
    return found


def _read_regular(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, RECORD_LIMIT).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


class WorldView:
    capabilities: frozenset[str] = CAPABILITIES  # an adapter adds "isolation" when its world has it
    vendor: ClassVar[str] = "vendor"

    def __init__(self, faults: Faults, routes: Mapping[str, tuple[str, ...]]):
        self.faults = FaultScript(faults, routes)

    # -- what a vendor says --------------------------------------------------------------
    def sandboxes(self) -> dict[str, str]:
        """Every sandbox that is not deleted, with its state."""
        raise NotImplementedError

    def nonce_places(self) -> Iterable[tuple[str, Path]]:
        """(sandbox id, directory) pairs where a check's nonce may be, in the order to look."""
        raise NotImplementedError

    def credentials(self, sandbox_id: str) -> Collection[str]:
        """Digests (fakes.keys.key_digest) of the credentials that reached the sandbox."""
        raise NotImplementedError

    def record_places(self) -> Iterable[tuple[str, Path]]:
        """(sandbox id, directory) pairs under which a check's record file may be (it lives in the
        directory the backend keeps, or the environment's cwd): the nonce places unless a view adds more."""
        return self.nonce_places()

    def find_record(self, name: str, near: str | None = None) -> dict[str, str]:
        """Sandbox id -> the text of the check's record file ``name``, for every sandbox holding one
        (found by its name under the sandbox's places: ``near``, the directory it was made in, is not needed)."""
        return find_records(self.record_places(), name)

    def pause(self, sandbox_id: str) -> None:
        raise NotImplementedError

    def fail(self, sandbox_id: str) -> None:
        raise NotImplementedError

    def delete(self, sandbox_id: str) -> None:
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------
    def locate(self, relpath: str, content: str) -> str | None:
        """The sandbox whose ``relpath`` (under one of its nonce places) holds ``content``.

        Read through fakes.boxfs: a box's symlink or FIFO at that path leads nowhere outside it and never
        blocks the kit."""
        limit = len(content.encode("utf-8")) + 4096
        for sandbox_id, base in self.nonce_places():
            try:
                text = boxfs.BoxFS([boxfs.Area("/", base)]).read_text("/" + relpath.lstrip("/"), limit)
            except (boxfs.FsError, OSError):
                continue
            if text.strip() == content:
                return sandbox_id
        return None

    def authenticated_with(self, sandbox_id: str, credential: str) -> bool:
        """Was this credential used against this sandbox (it is the only key that can reach it)?"""
        return key_digest(credential) in self.credentials(sandbox_id)


class BoxWorldView(WorldView):
    """A view of a fake whose sandboxes are the boxes of a ``fakes.world.World`` themselves."""

    def __init__(self, world: World, faults: Faults, routes: Mapping[str, tuple[str, ...]]):
        super().__init__(faults, routes)
        self.world = world

    def box(self, sandbox_id: str) -> Box:
        box = self.world.get(sandbox_id, include_deleted=True)
        if box is None:
            raise KeyError(f"no sandbox {sandbox_id!r} in the {self.vendor} fake")
        return box

    def nonce_places(self) -> Iterable[tuple[str, Path]]:
        for box in self.world.boxes():
            yield box.id, box.home_dir

    def record_places(self) -> Iterable[tuple[str, Path]]:
        for box in self.world.boxes():
            yield box.id, box.home_dir
            yield box.id, box.workspace_dir

    def credentials(self, sandbox_id: str) -> Collection[str]:
        return self.box(sandbox_id).credentials_seen
