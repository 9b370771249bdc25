"""An unisolated box's Hermes session files leave this machine's /tmp with the box, and nothing else does."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from fakes import host_tmp
from fakes.world import World

# What Hermes's session bootstrap writes into the sandbox's /tmp (tools/environments/base.py init_session).
_SESSION = "export -p > /tmp/hermes-snap-{sid}.sh; pwd > /tmp/hermes-cwd-{sid}.txt"


def _session_files(sid: str) -> list[Path]:
    return [Path(f"/tmp/hermes-snap-{sid}.sh"), Path(f"/tmp/hermes-cwd-{sid}.txt")]


def test_a_deleted_unisolated_box_takes_its_session_files_and_leaves_others(tmp_path):
    world = World(tmp_path / "world", namespaces=False)
    ours, other = secrets.token_hex(6), secrets.token_hex(6)
    link = Path(f"/tmp/hermes-snap-{secrets.token_hex(6)}.sh")
    try:
        box = world.create()
        assert world.spawn(box, cmd=_SESSION.format(sid=ours), login=False).wait(10) == 0
        # Another program's session (another HOME), and a link to our snapshot: neither is the box's.
        Path(f"/tmp/hermes-snap-{other}.sh").write_text('declare -x HOME="/home/someone"\n')
        link.symlink_to(f"/tmp/hermes-snap-{ours}.sh")
        assert all(p.exists() for p in _session_files(ours))
        world.delete(box)
        assert not any(p.exists() for p in _session_files(ours))
        assert Path(f"/tmp/hermes-snap-{other}.sh").exists() and os.path.lexists(link)
    finally:
        world.close()
        for leftover in (*_session_files(ours), *_session_files(other), link):
            leftover.unlink(missing_ok=True)


def test_closing_the_world_sweeps_the_boxes_still_there(tmp_path):
    world = World(tmp_path / "world", namespaces=False)
    sid = secrets.token_hex(6)
    try:
        box = world.create()
        assert world.spawn(box, cmd=_SESSION.format(sid=sid), login=False).wait(10) == 0
    finally:
        world.close()
    try:
        assert not any(p.exists() for p in _session_files(sid))
    finally:
        for leftover in _session_files(sid):
            leftover.unlink(missing_ok=True)


def test_only_regular_files_of_this_user_are_read(tmp_path):
    fifo = tmp_path / f"hermes-snap-{secrets.token_hex(6)}.sh"
    os.mkfifo(fifo)
    assert host_tmp.sweep([Path("/x")], tmp=tmp_path) == 0  # a FIFO is neither read nor waited on
    assert fifo.exists()


def test_tempdir_box_default_root_goes_with_its_last_box(tmp_path, monkeypatch):
    import tempfile

    from fakes.tempdir_box.boxes import Box, default_root

    monkeypatch.delenv("TEMPDIR_BOX_ROOT", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    root = default_root()
    first, second = Box(root / "a"), Box(root / "b")
    first.create(task_id="a", persistent=False, owner=None)
    second.create(task_id="b", persistent=False, owner=None)
    first.delete()
    assert root.is_dir()  # another box still lives there
    second.delete()
    assert not root.exists()
