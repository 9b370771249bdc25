"""Workspace init: idempotent and without compute, config conflicts, named images, the instance allowlist."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fakes.cloudflare import BridgeServer, Settings

from .bridge_client import (
    Client,
    error_of,
    new_id,
    rid,
)


def test_init_is_idempotent_and_does_not_boot(client: Client, server: BridgeServer) -> None:
    sandbox = new_id()
    first = client.init(sandbox, persistent=True)
    again = client.init(sandbox, persistent=True, cwd="/workspace", image="hermes", instance="standard-1")
    assert first.json() == again.json() == {"ok": True, "running": False}
    assert first.headers["cache-control"] == "no-store"
    assert server.world.get(sandbox) is None, "init started a container"
    status = client.status(sandbox).json()
    assert status == {
        "config": {"persistent": True, "cwd": "/workspace", "image": "hermes", "instance": "standard-1"},
        "running": False,
        "busy": False,
        "snapshot_saved_at": None,
    }


def test_reinit_after_boot_reports_running(client: Client, sid: str) -> None:
    assert client.exec(sid, "true").exit_code == 0
    assert client.init(sid).json() == {"ok": True, "running": True}


@pytest.mark.parametrize("change", [{"persistent": False}, {"cwd": "/workspace/other"}, {"instance": "lite"}])
def test_init_with_a_different_config_is_a_conflict(client: Client, sid: str, change: dict[str, Any]) -> None:
    resp = client.post(f"/v1/sandboxes/{sid}", {"persistent": True, **change})
    assert error_of(resp) == (409, "config_conflict")
    assert client.status(sid).json()["config"]["cwd"] == "/workspace"


def test_unknown_image_is_refused_without_compute(client: Client, server: BridgeServer) -> None:
    sandbox = new_id()
    assert error_of(client.init(sandbox, image="nope")) == (400, "image_not_found")
    assert error_of(client.status(sandbox)) == (404, "workspace_missing")
    assert server.world.get(sandbox) is None


def test_named_images_seed_a_cold_start(tmp_path: Path) -> None:
    image = tmp_path / "py"
    (image / "workspace").mkdir(parents=True)
    (image / "workspace" / "hello.txt").write_text("from the image\n")
    with BridgeServer(settings=Settings.quick(images={"hermes": None, "py": image})) as srv:
        cli = Client(srv)
        sandbox = new_id()
        assert cli.init(sandbox, image="py").status_code == 200
        assert cli.exec(sandbox, "cat hello.txt").output == "from the image\n"
        other = new_id()
        assert cli.init(other).status_code == 200
        assert cli.exec(other, "ls -A; ls -A ~").output == ".hermes\n"
        cli.close()


@pytest.mark.parametrize(
    "instance,ok",
    [
        ("lite", True),
        ("standard-1", True),
        ("standard-2", False),
        ("standard-4", False),
        ("basic", False),
        ("huge", False),
    ],
)
def test_instance_allowlist(client: Client, instance: str, ok: bool) -> None:
    resp = client.init(new_id(), instance=instance)
    if ok:
        assert resp.status_code == 200
    else:
        assert error_of(resp) == (400, "instance_not_allowed")


def test_instance_allowlist_is_configurable() -> None:
    with BridgeServer(settings=Settings.quick(allowed_instances=("standard-4",), default_instance="standard-4")) as srv:
        cli = Client(srv)
        assert cli.init(new_id()).status_code == 200
        assert error_of(cli.init(new_id(), instance="lite")) == (400, "instance_not_allowed")
        cli.close()
    with pytest.raises(ValueError):
        Settings(allowed_instances=("gigantic",))


def test_status_before_init_is_workspace_missing(client: Client) -> None:
    assert error_of(client.status(new_id())) == (404, "workspace_missing")
    sandbox = new_id()
    assert error_of(client.post(f"/v1/sandboxes/{sandbox}/exec", {"request_id": rid(), "command": "true"})) == (
        404,
        "workspace_missing",
    )
    assert error_of(client.post(f"/v1/sandboxes/{sandbox}/checkpoint")) == (404, "workspace_missing")
    assert error_of(client.post(f"/v1/sandboxes/{sandbox}/read", {"path": "/x"})) == (404, "workspace_missing")
