"""The Cloudflare fake as the kit runs it: service.start, the harness world, and ``python -m fakes.cloudflare``."""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.cloudflare import BridgeServer, CloudflareWorld
from fakes.cloudflare import service as cf_service
from fakes.services import FakeService

from .bridge_client import host_pid

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeService]:
    service = cf_service.start(tmp_path_factory.mktemp("cf"))
    yield service
    service.stop()


class Bridge:
    """Just enough of a protocol v1 client for the harness checks."""

    def __init__(self, fake: FakeService):
        self.http = httpx.Client(
            base_url=fake.env["HERMES_CF_ENDPOINT"],
            timeout=30,
            headers={"Authorization": f"Bearer {fake.env['HERMES_CF_TOKEN']}"},
        )

    def init(self, sid: str, persistent: bool = True) -> httpx.Response:
        return self.http.post(f"/v1/sandboxes/{sid}", json={"persistent": persistent})

    def run(self, sid: str, command: str) -> dict[str, Any]:
        resp = self.http.post(f"/v1/sandboxes/{sid}/exec", json={"request_id": uuid.uuid4().hex, "command": command})
        if resp.status_code != 200:
            return resp.json()
        events = [json.loads(line) for line in resp.text.splitlines()]
        return events[-1] | {"output": "".join(e["data"] for e in events if e["type"] == "output")}


@pytest.fixture
def bridge(fake: FakeService) -> Iterator[Bridge]:
    cli = Bridge(fake)
    yield cli
    cli.http.close()


def new_id() -> str:
    return "w-" + uuid.uuid4().hex[:12]


def plant(bridge: Bridge, sid: str) -> tuple[str, str]:
    value = "kit-" + uuid.uuid4().hex
    assert bridge.run(sid, f'printf %s {value} > "$HOME/.kit-{value}"')["exit_code"] == 0
    return f".kit-{value}", value


def test_start_exports_the_plugin_variables(fake: FakeService) -> None:
    assert fake.name == "cloudflare"
    assert set(fake.env) == {"HERMES_CF_ENDPOINT", "HERMES_CF_TOKEN"}
    assert fake.env["HERMES_CF_ENDPOINT"].startswith("http://127.0.0.1:")
    token = fake.env["HERMES_CF_TOKEN"]
    assert len(token) >= 32 and not any(c.isspace() for c in token)
    assert fake.secret_vars == frozenset({"HERMES_CF_TOKEN"}) and fake.credential_var == "HERMES_CF_TOKEN"
    isolation = {"isolation"} if fake.world.bridge.world.isolated else set()
    assert fake.world.capabilities == frozenset({"world", "world-states", "transport-faults"} | isolation)
    resp = httpx.get(fake.env["HERMES_CF_ENDPOINT"] + "/health", headers={"Authorization": f"Bearer {token}"})
    # The kit's fake offers every protocol extension; the v1 fields are unchanged.
    assert resp.json() == {
        "ok": True,
        "protocol": 1,
        "extensions": ["concurrent-exec", "large-output"],
        "limits": {"concurrent_execs": 16, "max_output": 1 << 30},
    }


def test_bridge_server_has_the_fake_serve_shape() -> None:
    key = "k" * 40
    server = BridgeServer(host="127.0.0.1", port=0, api_keys=[key]).start()
    try:
        assert server.exports() == {"HERMES_CF_ENDPOINT": server.base_url, "HERMES_CF_TOKEN": key}
        assert server.paths_note == server.world.paths_note
        assert server.settings.heartbeat_s == 10.0  # standalone: the Worker's timings
        resp = httpx.get(server.base_url + "/health", headers={"Authorization": f"Bearer {key}"})
        assert resp.json() == {"ok": True, "protocol": 1}
    finally:
        server.stop()


def test_world_states_follow_the_workspace(fake: FakeService, bridge: Bridge) -> None:
    world: CloudflareWorld = fake.world
    sid = new_id()
    assert sid not in world.sandboxes()
    bridge.init(sid)
    assert world.sandboxes()[sid] == "idle"  # configured, no compute
    relpath, value = plant(bridge, sid)
    assert world.sandboxes()[sid] == "running"
    assert world.locate(relpath, value) == sid
    assert world.locate(relpath, "something else") is None

    world.pause(sid)
    assert world.sandboxes()[sid] == "paused"
    assert world.locate(relpath, value) == sid  # found in the snapshot
    assert bridge.run(sid, f"cat ~/{relpath}")["output"] == value  # restored
    assert world.sandboxes()[sid] == "running"

    world.fail(sid)
    assert world.sandboxes()[sid] == "error"
    assert bridge.run(sid, "true") == {"type": "error", "code": "workspace_lost", "output": ""}
    assert world.sandboxes()[sid] == "error"

    world.delete(sid)
    assert world.sandboxes()[sid] == "deleted"
    assert bridge.run(sid, "true")["error"]["code"] == "workspace_missing"
    bridge.init(sid)  # the same identity can be initialised again, fresh
    assert bridge.run(sid, f"test -e ~/{relpath} && echo old || echo fresh")["output"] == "fresh\n"
    assert world.sandboxes()[sid] == "running"


def test_fail_without_a_boot_still_reports_the_loss(fake: FakeService, bridge: Bridge) -> None:
    sid = new_id()
    bridge.init(sid)
    fake.world.fail(sid)
    assert bridge.run(sid, "true")["code"] == "workspace_lost"


def test_delete_mid_command_ends_the_stream(fake: FakeService, bridge: Bridge) -> None:
    sid = new_id()
    bridge.init(sid)
    plant(bridge, sid)
    other = Bridge(fake)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(other.run, sid, "echo go; sleep 30")
        deadline = time.monotonic() + 5
        while fake.world.workspace(sid).active is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.1)
        started = time.monotonic()
        fake.world.delete(sid)
        result = future.result(5)
    assert result["code"] == "workspace_lost" and time.monotonic() - started < 2
    other.http.close()


def test_authenticated_with_names_the_token_used(fake: FakeService, bridge: Bridge) -> None:
    sid = new_id()
    bridge.init(sid)
    assert fake.world.authenticated_with(sid, fake.env["HERMES_CF_TOKEN"])
    assert not fake.world.authenticated_with(sid, "kit-decoy-0123456789abcdef0123456789")
    assert not fake.world.authenticated_with(new_id(), fake.env["HERMES_CF_TOKEN"])


def test_stop_kills_box_processes(tmp_path: Path) -> None:
    service = cf_service.start(tmp_path)
    cli = Bridge(service)
    sid = new_id()
    cli.init(sid)
    pid = host_pid(service.world.bridge.world, sid, int(cli.run(sid, "sleep 60 >/dev/null 2>&1 & echo $!")["output"]))
    assert pid is not None
    cli.http.close()
    service.stop()
    deadline = time.monotonic() + 3
    while Path(f"/proc/{pid}").exists() and b") Z" not in Path(f"/proc/{pid}/stat").read_bytes():
        assert time.monotonic() < deadline, "a box process outlived the fake"
        time.sleep(0.02)


def test_python_m_fakes_cloudflare_serves_and_prints_exports(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fakes.cloudflare", "--port", "0", "--workdir", str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        lines: list[str] = []
        assert proc.stdout is not None
        while not any(line.startswith("# box paths") for line in lines):
            line = proc.stdout.readline()
            assert line, f"the fake exited: {proc.stderr.read() if proc.stderr else ''}"
            lines.append(line.strip())
        exports = dict(line[len("export ") :].split("=", 1) for line in lines if line.startswith("export "))
        assert set(exports) == {"HERMES_CF_ENDPOINT", "HERMES_CF_TOKEN"}
        resp = httpx.get(
            exports["HERMES_CF_ENDPOINT"] + "/health", headers={"Authorization": f"Bearer {exports['HERMES_CF_TOKEN']}"}
        )
        assert resp.json() == {"ok": True, "protocol": 1}
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
