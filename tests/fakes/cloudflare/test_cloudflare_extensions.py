"""The bridge fake's protocol extensions: concurrent-exec and large-output, negotiated through /health.

A Worker that does not offer an extension is plain v1 (its fields are
unknown_field); one that does keeps v1's behaviour for every request that
does not opt in.  Also the stream's backpressure: a slow reader slows the
command down instead of growing the server's queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from fakes.cloudflare import BridgeServer, CloudflareWorld, Settings
from fakes.cloudflare.settings import EXTENSIONS, MAX_OUTPUT_UNITS

from .bridge_client import (
    FAST,
    Client,
    error_of,
    in_background,
    new_id,
    rid,
    wait_for,
)

FIELDS = {name: getattr(FAST, name) for name in FAST.__dataclass_fields__}


def make(**overrides: Any) -> BridgeServer:
    return BridgeServer(settings=Settings.quick(**{**FIELDS, **overrides})).start()


@pytest.fixture(scope="module")
def server() -> Iterator[BridgeServer]:
    srv = make(extensions=EXTENSIONS, max_concurrent_execs=3, large_output_units=3_000_000)
    yield srv
    srv.stop()


@pytest.fixture
def client(server: BridgeServer) -> Iterator[Client]:
    cli = Client(server)
    yield cli
    cli.close()


@pytest.fixture
def sid(client: Client) -> str:
    sandbox = new_id("x")
    assert client.init(sandbox).status_code == 200
    return sandbox


# ---------------------------------------------------------------------------- negotiation
def test_health_offers_the_extensions_and_their_limits(client: Client) -> None:
    assert client.http.get("/health").json() == {
        "ok": True,
        "protocol": 1,
        "extensions": ["concurrent-exec", "large-output"],
        "limits": {"concurrent_execs": 3, "max_output": 3_000_000},
    }


def test_a_worker_without_extensions_is_plain_v1() -> None:
    srv = make()
    try:
        cli = Client(srv)
        assert cli.http.get("/health").json() == {"ok": True, "protocol": 1}
        sandbox = new_id("v1")
        cli.init(sandbox)
        for extra in ({"concurrent": True}, {"max_output": 3_000_000}):
            run = cli.exec(sandbox, "true", **extra)
            assert (run.status, run.error_code) == (400, "unknown_field"), extra
        cli.close()
    finally:
        srv.stop()


def test_one_extension_alone() -> None:
    srv = make(extensions=("large-output",))
    try:
        cli = Client(srv)
        assert cli.http.get("/health").json()["limits"] == {"max_output": 1 << 30}
        sandbox = new_id("one")
        cli.init(sandbox)
        assert cli.exec(sandbox, "true", concurrent=True).error_code == "unknown_field"
        assert cli.exec(sandbox, "echo ok", max_output=10).output == "ok\n"
        cli.close()
    finally:
        srv.stop()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("concurrent", 1),
        ("concurrent", "yes"),
        ("max_output", 0),
        ("max_output", 3_000_001),
        ("max_output", 1.5),
        ("max_output", True),
        ("max_output", "10"),
    ],
)
def test_extension_fields_are_validated(client: Client, sid: str, field: str, value: Any) -> None:
    assert client.exec(sid, "true", **{field: value}).error_code == "invalid_field"


def test_null_means_the_v1_default(client: Client, sid: str) -> None:
    run = client.exec(sid, "echo ok", concurrent=None, max_output=None)
    assert (run.exit_code, run.output) == (0, "ok\n")


# ---------------------------------------------------------------------------- concurrent-exec
def test_concurrent_execs_run_together(client: Client, sid: str, server: BridgeServer) -> None:
    flag = f"/tmp/flag-{rid()}"
    waiter = in_background(
        lambda: client.exec(sid, f"while [ ! -e {flag} ]; do sleep 0.02; done; echo got", concurrent=True, timeout=10)
    )
    wait_for(lambda: client.status(sid).json()["busy"], what="the first exec")
    poke = Client(server)
    assert poke.exec(sid, f"touch {flag}", concurrent=True).exit_code == 0
    run = waiter.result(10)
    assert (run.exit_code, run.output) == (0, "got\n")
    poke.close()


def test_concurrent_cold_start_boots_one_container(server: BridgeServer, sid: str) -> None:
    clients = [Client(server) for _ in range(3)]
    runs = [in_background(lambda c=c: c.exec(sid, "sleep 0.2; echo $$", concurrent=True)) for c in clients]
    results = [r.result(20) for r in runs]
    assert [r.exit_code for r in results] == [0, 0, 0] and len({r.output for r in results}) == 3
    assert CloudflareWorld(server.bridge).sandboxes()[sid] == "running"
    assert len([b for b in server.world.boxes() if b.id == sid]) == 1
    for c in clients:
        c.close()


def test_the_cap_and_exclusive_operations_get_busy(server: BridgeServer, sid: str) -> None:
    holders = [Client(server) for _ in range(3)]
    runs = [in_background(lambda c=c: c.exec(sid, "sleep 0.6", concurrent=True)) for c in holders]
    ws = server.bridge.find(sid)
    assert ws is not None
    wait_for(lambda: len(ws.shared) == 3, what="three shared execs")
    probe = Client(server)
    assert probe.exec(sid, "true", concurrent=True).error_code == "workspace_busy"  # over max_concurrent_execs
    assert probe.exec(sid, "true").error_code == "workspace_busy"  # a v1 exec stays exclusive
    for path in ("release", "checkpoint", "read"):
        body = {"path": "/etc/hostname"} if path == "read" else {}
        assert error_of(probe.post(f"/v1/sandboxes/{sid}/{path}", body)) == (409, "workspace_busy"), path
    assert error_of(probe.init(sid)) == (409, "workspace_busy")
    assert probe.status(sid).json()["busy"] is True
    assert [r.result(10).exit_code for r in runs] == [0, 0, 0]
    wait_for(lambda: not probe.status(sid).json()["busy"], what="the workspace to be free")
    for c in [*holders, probe]:
        c.close()


def test_a_v1_exec_keeps_concurrent_ones_out(server: BridgeServer, sid: str) -> None:
    first, second = Client(server), Client(server)
    held = in_background(lambda: first.exec(sid, "sleep 0.4"))
    ws = server.bridge.find(sid)
    assert ws is not None
    wait_for(lambda: ws.active is not None, what="the v1 exec")
    assert second.exec(sid, "true", concurrent=True).error_code == "workspace_busy"
    assert held.result(10).exit_code == 0
    wait_for(lambda: ws.active is None, what="the v1 exec to end")
    assert second.exec(sid, "echo ok", concurrent=True).output == "ok\n"
    first.close()
    second.close()


def test_cancel_stops_only_its_own_concurrent_exec(server: BridgeServer, sid: str) -> None:
    one, two, three = Client(server), Client(server), Client(server)
    ids = rid(), rid()
    running = threading.Event()  # cancelled before it starts, an exec ends as command_cancelled instead

    def seen(event: dict[str, Any]) -> None:
        if event["type"] == "started":
            running.set()

    doomed = in_background(lambda: one.exec(sid, "sleep 5", rid=ids[0], concurrent=True, on_event=seen))
    kept = in_background(lambda: two.exec(sid, "sleep 0.5; echo kept", rid=ids[1], concurrent=True))
    ws = server.bridge.find(sid)
    assert ws is not None
    wait_for(lambda: len(ws.shared) == 2, what="two shared execs")
    assert running.wait(10), "the exec to cancel never started"
    assert three.cancel(sid, ids[0]).json() == {"ok": True}
    assert doomed.result(10).exit_code == 143
    run = kept.result(10)
    assert (run.exit_code, run.output) == (0, "kept\n")
    assert three.exec(sid, "true", rid=ids[1], concurrent=True).error_code == "duplicate_request"
    for c in (one, two, three):
        c.close()


def test_the_idle_alarm_waits_for_concurrent_execs(server: BridgeServer, client: Client) -> None:
    sandbox = new_id("idle")
    client.init(sandbox)
    running = in_background(lambda: Client(server).exec(sandbox, "sleep 0.5; echo done", concurrent=True))
    ws = server.bridge.find(sandbox)
    assert ws is not None
    wait_for(lambda: len(ws.shared) == 1 and ws.running, what="the shared exec")
    CloudflareWorld(server.bridge).idle_now(sandbox)
    assert ws.running, "the idle alarm stopped a workspace with a running exec"
    assert running.result(10).output == "done\n"


# ---------------------------------------------------------------------------- large-output
def test_max_output_raises_and_lowers_the_limit(client: Client, sid: str) -> None:
    big = client.exec(sid, "head -c 2500000 /dev/zero | tr '\\0' x", max_output=3_000_000)
    assert big.exit_code == 0 and len(big.output) == 2_500_000
    over = client.exec(sid, "head -c 3100000 /dev/zero | tr '\\0' x", max_output=3_000_000)
    assert over.error_code == "output_limit" and len(over.output) <= 3_000_000
    small = client.exec(sid, "seq 1 1000", max_output=100)
    assert small.error_code == "output_limit" and len(small.output) <= 100
    default = client.exec(sid, "head -c 2100000 /dev/zero | tr '\\0' x")
    assert default.error_code == "output_limit" and len(default.output) <= MAX_OUTPUT_UNITS


# ---------------------------------------------------------------------------- backpressure
def test_a_slow_reader_slows_the_command() -> None:
    srv = make(extensions=EXTENSIONS)
    try:
        sandbox = new_id("slow")
        Client(srv).init(sandbox)
        marker = f"done-{rid()}"
        body = {
            "request_id": rid(),
            "command": f"head -c 20000000 /dev/zero | tr '\\0' x; touch /tmp/{marker}",
            "max_output": 30_000_000,
        }
        ws = srv.bridge.find(sandbox)
        assert ws is not None
        with (
            httpx.Client(base_url=srv.base_url, headers={"Authorization": f"Bearer {srv.token}"}, timeout=30) as http,
            http.stream("POST", f"/v1/sandboxes/{sandbox}/exec", json=body) as resp,
        ):
            chunks = resp.iter_raw()
            next(chunks)
            time.sleep(0.5)  # read nothing: the command may run ahead only by the credits and the buffers
            assert ws.box is not None and not (ws.box.tmp_dir / marker).exists(), "the command ran ahead of its reader"
            size = sum(len(c) for c in chunks)
        assert size > 20_000_000
        wait_for(lambda: ws.box is not None and (ws.box.tmp_dir / marker).exists(), what="the command to finish")
    finally:
        srv.stop()
