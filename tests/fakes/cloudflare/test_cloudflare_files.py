"""The bridge's own file work in a hostile box: the cwd it makes, the snapshots it copies, /read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakes import boxfs
from fakes.cloudflare import BridgeServer

from .bridge_client import Client, new_id

ROOT = os.geteuid() == 0


def test_the_cwd_is_never_made_through_a_link_out_of_the_box(client: Client, tmp_path: Path) -> None:
    outside = tmp_path / "host-dir"
    outside.mkdir()
    sid = new_id()
    assert client.init(sid, cwd="/workspace/out/new").status_code == 200
    assert client.exec(sid, "pwd").output.strip().endswith("/workspace/out/new")
    # The box swaps the cwd's parent for a link to a host directory; every command makes the cwd first.
    # The link's target is read as a path inside the box (here: under the box's own /tmp) or refused.
    client.exec(sid, f"cd / && rm -rf /workspace/out && ln -s {outside} /workspace/out", login=False)
    run = client.exec(sid, "true")
    assert run.exit_code == 0 or run.error_code == "invalid_cwd", run.events
    assert list(outside.iterdir()) == [], "the cwd was made outside the box"


@pytest.mark.skipif(not ROOT, reason="giving files to another user needs root")
def test_snapshots_and_restores_give_the_files_to_the_box_owner(
    client: Client, server: BridgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = boxfs.box_owner(server.world)
    if owner == (os.geteuid(), os.getegid()):  # a world whose box root is this process: pretend another owner
        owner = (4242, 4343)
        monkeypatch.setattr(server.world, "box_uid", owner[0], raising=False)
        monkeypatch.setattr(server.world, "box_gid", owner[1], raising=False)
    sid = new_id()
    client.init(sid)
    client.exec(sid, "mkdir -p d && echo kept > d/f && echo home > ~/h")
    assert client.post(f"/v1/sandboxes/{sid}/release").status_code == 200
    assert client.exec(sid, "cat d/f").output == "kept\n", "restored from the snapshot"
    box = server.world.get(sid)
    assert box is not None
    for path in (box.workspace_dir / "d", box.workspace_dir / "d" / "f", box.home_dir / "h", box.home_dir / ".hermes"):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == owner, path


def test_read_never_follows_a_link_out_of_the_box(client: Client, sid: str, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret"
    secret.write_text("host only\n")
    cwd = client.exec(sid, f"ln -sf {secret} leak; pwd").output.strip()
    resp = client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/leak"})
    assert resp.status_code == 404 and b"host only" not in resp.content
