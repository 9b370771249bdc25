"""Every scripted fault kind on the bridge: status, latency, drop, half-close, silence, garbage, truncate, flood."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from fakes.cloudflare import BridgeServer
from fakes.cloudflare.settings import (
    ROUTE_EXEC,
    ROUTE_HEALTH,
    ROUTE_INIT,
    ROUTE_STATUS,
)
from fakes.faults import Fault

from .bridge_client import (
    Client,
    error_of,
    new_id,
    rid,
    wait_for,
)


def test_fault_status_answers_with_the_error_body_once(client: Client, sid: str, server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="status", route=ROUTE_EXEC, status=503, message="scripted"))
    resp = client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": "touch ran"})
    assert resp.status_code == 503 and resp.json() == {"error": {"code": "internal_error", "message": "scripted"}}
    assert client.exec(sid, "test -e ran && echo ran || echo no").output == "no\n"
    assert server.faults.log[-1] == (ROUTE_EXEC, sid, "status")


def test_fault_status_applies_before_auth_and_can_target_one_box(client: Client, server: BridgeServer) -> None:
    target, other = new_id(), new_id()
    server.faults.arm(Fault(kind="status", route=ROUTE_INIT, box=target, status=429, times=2))
    assert client.init(other).status_code == 200
    assert error_of(client.init(target)) == (429, "injected_fault")
    assert httpx.post(f"{server.base_url}/v1/sandboxes/{target}", json={}).status_code == 429
    assert client.init(target).status_code == 200


def test_fault_latency_delays_then_answers(client: Client, server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="latency", route=ROUTE_HEALTH, delay_s=0.3))
    started = time.monotonic()
    assert client.http.get("/health").json() == {"ok": True, "protocol": 1}
    assert time.monotonic() - started >= 0.3


def test_fault_with_no_route_matches_every_route_including_unknown_paths(client: Client, server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="status", status=502, times=3))
    assert client.http.get("/health").status_code == 502
    assert client.http.get("/no/such/path").status_code == 502
    assert client.status(new_id()).status_code == 502
    assert [entry[0] for entry in server.faults.log[-3:]] == ["GET /health", "GET /no/such/path", ROUTE_STATUS]


def test_fault_drop_cuts_the_exec_stream(client: Client, sid: str, server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="drop", route=ROUTE_EXEC, after_bytes=20))
    got = b""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.http.stream(
            "POST", f"/v1/sandboxes/{sid}/exec", json={"request_id": rid(), "command": "echo $$; sleep 30"}
        ) as resp,
    ):
        assert resp.status_code == 200
        for chunk in resp.iter_raw():
            got += chunk
    assert len(got) == 20
    # the server saw its own disconnect: the command was cancelled and the workspace freed
    wait_for(lambda: client.status(sid).json()["busy"] is False, what="the workspace to be free")


def test_fault_drop_on_a_json_route_loses_only_the_answer(client: Client, server: BridgeServer) -> None:
    sandbox = new_id()
    server.faults.arm(Fault(kind="drop", route=ROUTE_INIT, after_bytes=5))
    with pytest.raises(httpx.RemoteProtocolError):
        client.init(sandbox)
    assert client.status(sandbox).status_code == 200, "the init did not happen"


def test_fault_half_close_stops_sending_but_keeps_the_connection(
    client: Client, sid: str, server: BridgeServer
) -> None:
    server.faults.arm(Fault(kind="half-close", route=ROUTE_EXEC, after_bytes=0))
    slow = httpx.Client(
        base_url=server.base_url,
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=httpx.Timeout(10, read=0.8),
    )
    with (
        pytest.raises(httpx.ReadTimeout),
        slow.stream("POST", f"/v1/sandboxes/{sid}/exec", json={"request_id": rid(), "command": "echo ran > h"}) as resp,
    ):
        assert resp.status_code == 200
        resp.read()
    slow.close()
    assert client.exec(sid, "cat h").output == "ran\n", "the command did not run"


def test_fault_silence_never_answers_and_does_nothing(client: Client, server: BridgeServer) -> None:
    sandbox = new_id()
    server.faults.arm(Fault(kind="silence", route=ROUTE_INIT))
    with pytest.raises(httpx.ReadTimeout):
        client.http.post(f"/v1/sandboxes/{sandbox}", json={"persistent": True}, timeout=httpx.Timeout(10, read=0.5))
    assert error_of(client.status(sandbox)) == (404, "workspace_missing")


def test_fault_garbage_inserts_a_malformed_line_then_carries_on(client: Client, sid: str, server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="garbage", route=ROUTE_EXEC, payload="}{ not json"))
    resp = client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": "echo hi"})
    lines = resp.content.split(b"\n")
    assert lines[0] == b"}{ not json"
    events = [json.loads(line) for line in lines[1:] if line]
    assert events[-1] == {"type": "exit", "exit_code": 0}
    server.faults.arm(Fault(kind="garbage", route=ROUTE_STATUS))
    with pytest.raises(ValueError):
        client.status(sid).json()


def test_fault_truncate_sends_half_a_line_and_closes(client: Client, sid: str, server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="truncate", route=ROUTE_EXEC, after_bytes=1))
    got = b""
    request_id = rid()
    with (
        pytest.raises(httpx.RemoteProtocolError),
        client.http.stream(
            "POST", f"/v1/sandboxes/{sid}/exec", json={"request_id": request_id, "command": "echo hi"}
        ) as resp,
    ):
        for chunk in resp.iter_raw():
            got += chunk
    first = json.dumps({"type": "started", "request_id": request_id}, separators=(",", ":")).encode()
    # the first line is whole; the line after it is cut in half
    assert got.startswith(first + b"\n") and not got.endswith(b"\n")
    assert len(got) > len(first) + 1


def test_fault_flood_makes_the_output_that_long(client: Client, sid: str, server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="flood", route=ROUTE_EXEC, flood_bytes=1000))
    run = client.exec(sid, "echo mine")
    assert run.exit_code == 0 and len(run.output) == 1000 + len("mine\n") and run.output.endswith("mine\n")
    server.faults.arm(Fault(kind="flood", route=ROUTE_EXEC))  # the default 256 MiB
    flooded = client.exec(sid, "echo mine")
    assert flooded.error_code == "output_limit"
    assert client.exec(sid, "true").exit_code == 0
