"""Scripted faults of the DeepInfra fake, as the real SDK experiences them.

The SDK retries GETs on transport errors and on 502/503/504, and never
retries POST, PUT, DELETE or the exec stream: the faults show both.
"""

from __future__ import annotations

import itertools
import json
import time

import httpx
import pytest
from deepinfra import (
    APIConnectionError,
    CapacityError,
    DeepInfraClient,
    InternalServerError,
    MaxRetriesExceededError,
    Sandbox,
)

from fakes.deepinfra import ROUTES
from fakes.deepinfra.settings import (
    ROUTE_CREATE,
    ROUTE_EXEC,
    ROUTE_GET,
    ROUTE_LIST,
    ROUTE_READ,
    ROUTE_WRITE,
)
from fakes.deepinfra.testing import Tenant
from fakes.faults import KINDS, Fault


def test_route_names_are_unique_and_cover_every_endpoint():
    assert len(set(ROUTES)) == len(ROUTES) == 10


# ------------------------------------------------------------------ status: GETs retried, the rest not
@pytest.fixture
def no_backoff(monkeypatch):  # type: ignore[no-untyped-def]
    """The SDK's retries without its 0.5-3 s sleeps."""
    monkeypatch.setattr("deepinfra.clients.deepinfra.backoff_delays", lambda: itertools.repeat(0.0))


def test_a_get_is_retried_through_502_503_504(fake: Tenant, no_backoff):  # type: ignore[no-untyped-def]
    sb = fake.create()
    for status in (502, 503, 504):
        fake.server.faults.arm(Fault("status", route=ROUTE_GET, box=sb.id, status=status, times=2))
        assert Sandbox.from_id(sb.id, client=fake.client).state == "running"
    assert [kind for route, _, kind in fake.server.faults.log if route == ROUTE_GET][-6:] == ["status"] * 6
    fake.server.faults.arm(Fault("status", route=ROUTE_GET, box=sb.id, status=503, times=3, message="busy"))
    with pytest.raises(CapacityError, match="busy"):
        sb.refresh()  # two retries, then the third 503 is final


def test_a_post_is_not_retried(fake: Tenant):
    fake.server.faults.arm(Fault("status", route=ROUTE_CREATE, status=503, message="no capacity"))
    with pytest.raises(CapacityError, match="no capacity"):
        fake.create()
    assert fake.boxes() == [], "a refused create must not create"
    assert fake.create().state == "running", "the fault fired once and was not retried past"
    sb = Sandbox.list(client=fake.client)[0]
    fake.server.faults.arm(Fault("status", route=ROUTE_EXEC, box=sb.id, status=502))
    with pytest.raises(InternalServerError):
        sb.exec("true")
    assert sb.exec("true").returncode == 0


def test_status_faults_use_either_error_shape(fake: Tenant):
    fake.server.faults.arm(Fault("status", route=ROUTE_LIST, status=500, message="boom"))
    assert fake.http("GET", "/v1/sandboxes").json() == {"detail": {"error": "boom"}}
    fake.settings.fault_error_shape = "flat"
    fake.server.faults.arm(Fault("status", route=ROUTE_LIST, status=500, message="boom"))
    assert fake.http("GET", "/v1/sandboxes").json() == {"error": "boom"}


# ------------------------------------------------------------------ latency, silence, half-close
def test_latency_delays_then_answers(fake: Tenant):
    fake.server.faults.arm(Fault("latency", route=ROUTE_LIST, delay_s=0.4))
    started = time.monotonic()
    assert Sandbox.list(client=fake.client) == []
    assert time.monotonic() - started >= 0.4


@pytest.mark.parametrize("kind", ["silence", "half-close"])
def test_silence_and_half_close_end_in_a_client_timeout(fake: Tenant, kind: str, no_backoff):  # type: ignore[no-untyped-def]
    quick = DeepInfraClient(api_key=fake.key, base_url=fake.server.base_url, timeout=0.3, max_retries=1)
    fake.server.faults.arm(Fault(kind, route=ROUTE_LIST, times=2))
    with pytest.raises(MaxRetriesExceededError):
        Sandbox.list(client=quick)


# ------------------------------------------------------------------ outcome unknown
def test_a_dropped_create_reply_leaves_a_sandbox_behind(fake: Tenant):
    fake.server.faults.arm(Fault("drop", route=ROUTE_CREATE, after_bytes=5))
    with pytest.raises(APIConnectionError):
        fake.create(tags={"creation": "c1"})
    leaked = Sandbox.list(tags={"creation": "c1"}, client=fake.client)
    assert len(leaked) == 1, "the create happened; only its reply was lost"


@pytest.mark.parametrize("kind", ["truncate", "garbage"])
def test_damaged_replies_do_not_parse(fake: Tenant, kind: str):
    fake.server.faults.arm(Fault(kind, route=ROUTE_LIST))
    with pytest.raises(ValueError):  # json.JSONDecodeError
        Sandbox.list(client=fake.client)
    assert Sandbox.list(client=fake.client) == []


def test_a_dropped_write_reply_still_wrote(fake: Tenant):
    sb = fake.create()
    fake.server.faults.arm(Fault("drop", route=ROUTE_WRITE, box=sb.id))
    with pytest.raises(APIConnectionError):
        sb.fs.write("/workspace/f", b"data")
    assert sb.fs.read("/workspace/f") == b"data"
    fake.server.faults.arm(Fault("truncate", route=ROUTE_READ, box=sb.id))
    assert sb.fs.read("/workspace/f") == b"da"


# ------------------------------------------------------------------ the exec stream
def _exec_raw(fake: Tenant, sandbox_id: str, command: list[str], timeout: float = 10) -> tuple[bytes, str | None]:
    """(body bytes received, error class name if the connection broke)."""
    got = bytearray()
    body = {"command": command, "timeout_seconds": 0}
    try:
        with httpx.stream(
            "POST",
            f"{fake.server.base_url}/v1/sandboxes/{sandbox_id}/exec",
            json=body,
            headers={"Authorization": f"Bearer {fake.key}"},
            timeout=timeout,
        ) as response:
            for chunk in response.iter_raw():
                got.extend(chunk)
    except httpx.HTTPError as exc:
        return bytes(got), type(exc).__name__
    return bytes(got), None


def test_a_dropped_stream_breaks_mid_output(fake: Tenant):
    sb = fake.create()
    fake.server.faults.arm(Fault("drop", route=ROUTE_EXEC, box=sb.id, after_bytes=20))
    body, broke = _exec_raw(fake, sb.id, ["bash", "-c", "for i in 1 2 3 4 5; do echo line $i; done"])
    assert broke is not None and len(body) == 20
    fake.server.faults.arm(Fault("drop", route=ROUTE_EXEC, box=sb.id, after_bytes=10))
    with pytest.raises(httpx.TransportError):  # the SDK reads the stream unguarded
        sb.exec("echo", "hello world")


def test_a_truncated_stream_ends_in_half_a_line(fake: Tenant):
    sb = fake.create()
    fake.server.faults.arm(Fault("truncate", route=ROUTE_EXEC, box=sb.id))
    body, broke = _exec_raw(fake, sb.id, ["echo", "hello"])
    assert broke is not None and not body.endswith(b"\n")


def test_a_garbage_line_in_the_stream(fake: Tenant):
    sb = fake.create()
    fake.server.faults.arm(Fault("garbage", route=ROUTE_EXEC, box=sb.id, payload="}{ not json"))
    body, broke = _exec_raw(fake, sb.id, ["echo", "hi"])
    lines = body.split(b"\n")
    assert broke is None and b"}{ not json" in lines
    assert json.loads(lines[-2]) == {"returncode": 0}, "the stream carries on after the garbage"
    fake.server.faults.arm(Fault("garbage", route=ROUTE_EXEC, box=sb.id))
    with pytest.raises(ValueError):
        sb.exec("echo", "hi")


def test_a_half_closed_stream_goes_quiet(fake: Tenant):
    sb = fake.create()
    fake.server.faults.arm(Fault("half-close", route=ROUTE_EXEC, box=sb.id, after_bytes=0))
    started = time.monotonic()
    body, broke = _exec_raw(fake, sb.id, ["echo", "hi"], timeout=0.5)
    assert broke == "ReadTimeout" and body == b"" and time.monotonic() - started < 3


def test_a_flood_prepends_output(fake: Tenant):
    sb = fake.create()
    fake.server.faults.arm(Fault("flood", route=ROUTE_EXEC, box=sb.id, flood_bytes=3 * 1024 * 1024))
    result = sb.exec("echo", "tail")
    assert len(result.stdout) == 3 * 1024 * 1024 + 5 and result.stdout.endswith("flood\ntail\n")


def test_every_fault_kind_is_exercised():
    exercised = {"status", "latency", "drop", "half-close", "silence", "garbage", "truncate", "flood"}
    assert exercised == set(KINDS)
