"""Scripted faults of the Upstash fake, as the real SDK experiences them."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from upstash_box import Box, BoxError

from fakes.faults import KINDS, Fault
from fakes.upstash import ROUTES, WS_ROUTE

from .helpers import Fake, alive, eventually

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
STREAM = "POST /v2/box/{id}/exec-stream"


def session(box, **kw):  # type: ignore[no-untyped-def]
    out = bytearray()
    handle = box.exec.session(on_stdout=out.extend, **kw)
    return handle, out


def test_route_names_are_documented_and_unique():
    assert len(set(ROUTES)) == len(ROUTES) and WS_ROUTE in ROUTES and STREAM in ROUTES


# ------------------------------------------------------------------ status and latency (every route)
@pytest.mark.parametrize("status", [429, 500, 503])
def test_status_fault_on_create_then_recovers(fake: Fake, status: int):
    fake.faults.arm(Fault("status", route="POST /v2/box", status=status, message="slow down"))
    with pytest.raises(BoxError) as info:
        fake.create(name="x")
    assert (info.value.status_code, info.value.message) == (status, "slow down")
    assert Box.list(**fake.kw) == [], "a refused create must not create"
    assert fake.create(name="x"), "the fault fires once"
    assert fake.faults.log[-1] == ("POST /v2/box", None, "status")


def test_status_fault_matches_one_box_only(fake: Fake):
    a, b = fake.create(name="a"), fake.create(name="b")
    fake.faults.arm(Fault("status", route="GET /v2/box/{id}", box=b.id, status=502, times=2))
    assert Box.get(a.id, **fake.kw).id == a.id
    for _ in range(2):
        with pytest.raises(BoxError) as info:
            Box.get_by_name("b", **fake.kw)  # a name resolves to the box the fault names
        assert info.value.status_code == 502
    assert Box.get(b.id, **fake.kw).id == b.id


def test_status_fault_on_the_session_upgrade(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("status", route=WS_ROUTE, status=503, message="busy"))
    with pytest.raises(BoxError, match="503"):
        box.exec.session(cmd="true")
    handle, _ = session(box, cmd="true")
    assert handle.wait(5) == 0


def test_latency_fault(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("latency", route="GET /v2/box/{id}/status", delay_s=0.3))
    started = time.monotonic()
    assert box.get_status() == {"status": "idle"}
    assert time.monotonic() - started >= 0.3
    fake.faults.arm(Fault("latency", route=WS_ROUTE, delay_s=0.3))
    started = time.monotonic()
    handle, _ = session(box, cmd="true")
    assert handle.wait(5) == 0 and time.monotonic() - started >= 0.3


# ------------------------------------------------------------------ silence
def test_silence_on_rest_times_out(fake: Fake):
    box = fake.create()
    slow = Box.get(box.id, **fake.kw, timeout=500)
    fake.faults.arm(Fault("silence", route="GET /v2/box/{id}/status"))
    started = time.monotonic()
    with pytest.raises(BoxError, match="Request timeout"):
        slow.get_status()
    assert 0.4 < time.monotonic() - started < 3


def test_silence_on_the_session_times_out_the_handshake(fake: Fake):
    box = Box.get(fake.create().id, **fake.kw, timeout=500)
    fake.faults.arm(Fault("silence", route=WS_ROUTE))
    with pytest.raises(BoxError, match="handshake timed out"):
        box.exec.session(cmd="touch /workspace/home/ran")
    assert not box.files.list(), "a silenced session must not run its command"


# ------------------------------------------------------------------ drop
def test_drop_mid_session(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("drop", route=WS_ROUTE, after_bytes=100_000))
    handle, out = session(box, cmd="head -c 1000000 /dev/zero; sleep 30")
    assert handle.wait(5) == -1
    assert len(out) == 100_000, "exactly after_bytes of output, then the connection went"
    assert eventually(lambda: not alive(handle.pid)), "a dropped session must kill its command"


def test_drop_at_start_of_session(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("drop", route=WS_ROUTE))
    handle, out = session(box, cmd="echo never")
    assert handle.wait(5) == -1 and out == b""


def test_drop_mid_exec_stream(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("drop", route=STREAM, after_bytes=6))
    seen = ""
    with pytest.raises(httpx.RemoteProtocolError):
        for chunk in box.exec.stream("echo hello; echo world; sleep 30"):
            seen += getattr(chunk, "data", "")
    assert seen == "hello\n"


def test_drop_of_a_create_response_still_creates(fake: Fake):
    fake.faults.arm(Fault("drop", route="POST /v2/box"))
    with pytest.raises(httpx.RemoteProtocolError):  # Box.create does not wrap transport errors
        fake.create(name="unknown-outcome")
    assert [d.name for d in Box.list(**fake.kw)] == ["unknown-outcome"], "the box exists; only the reply was lost"
    with pytest.raises(BoxError) as info:
        fake.create(name="unknown-outcome")
    assert info.value.status_code == 409


# ------------------------------------------------------------------ half-close
def test_half_close_session(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("half-close", route=WS_ROUTE, after_bytes=3))
    handle, out = session(box, cmd="echo abcdef; sleep 30")
    with pytest.raises(TimeoutError):
        handle.wait(0.5)
    assert out == b"abc", "output stops at after_bytes, and no exit frame comes"
    handle.kill("KILL")  # the server still reads: the signal is honoured
    assert eventually(lambda: not alive(handle.pid))
    with pytest.raises(TimeoutError):
        handle.wait(0.2)
    handle.close()


def test_half_close_exec_stream(fake: Fake):
    box = Box.get(fake.create().id, **fake.kw, timeout=600)
    fake.faults.arm(Fault("half-close", route=STREAM, after_bytes=2))
    seen = ""
    with pytest.raises(httpx.ReadTimeout):
        for chunk in box.exec.stream("echo hi; echo more"):
            seen += getattr(chunk, "data", "")
    assert seen == "hi"


def test_half_close_of_a_rest_reply(fake: Fake):
    box = Box.get(fake.create().id, **fake.kw, timeout=500)
    fake.faults.arm(Fault("half-close", route="GET /v2/box/{id}/status"))
    with pytest.raises(BoxError, match="Request timeout"):
        box.get_status()


# ------------------------------------------------------------------ garbage
def test_garbage_in_a_session_is_skipped(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("garbage", route=WS_ROUTE, after_bytes=2, payload="]not json["))
    handle, out = session(box, cmd="printf 1234; exit 5")
    assert handle.wait(5) == 5 and out == b"1234"


def test_garbage_at_the_start_of_a_session(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("garbage", route=WS_ROUTE, payload='{"type": "mystery"}'))
    handle, out = session(box, cmd="echo ok")
    assert handle.wait(5) == 0 and out == b"ok\n"


def test_garbage_in_exec_stream_is_in_band(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("garbage", route=STREAM, after_bytes=3, payload="#!@"))
    run = box.exec.stream("echo abcdef")
    assert "".join(getattr(c, "data", "") for c in run) == "abc#!@def\n" and run.exit_code == 0


def test_garbage_rest_reply_is_not_json(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("garbage", route="GET /v2/box/{id}/status"))
    with pytest.raises(json.JSONDecodeError):
        box.get_status()  # the SDK does not wrap a malformed 2xx body


# ------------------------------------------------------------------ truncate
def test_truncate_session_frame(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("truncate", route=WS_ROUTE, after_bytes=4))
    handle, out = session(box, cmd="printf abcdefgh; sleep 30")
    assert handle.wait(5) == -1
    assert out == b"abcd", "the frame after after_bytes arrives cut in half (unparseable), then the close"
    assert eventually(lambda: not alive(handle.pid))


def test_truncate_of_the_exit_frame(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("truncate", route=WS_ROUTE, after_bytes=1000))
    handle, out = session(box, cmd="echo short; exit 9")
    assert handle.wait(5) == -1 and out == b"short\n"


def test_truncate_exec_stream_trailer_reads_as_success(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("truncate", route=STREAM, after_bytes=3))
    chunks = list(box.exec.stream("echo abcdef; sleep 30; exit 3"))
    assert "".join(getattr(c, "data", "") for c in chunks) == "abc"
    # The SDK reads half a trailer ("event: exit" + broken data) as exit code 0: a hazard for clients.
    assert chunks[-1].type == "exit" and chunks[-1].exit_code == 0


def test_truncate_rest_reply(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("truncate", route="GET /v2/box/{id}"))
    with pytest.raises(json.JSONDecodeError):
        Box.get(box.id, **fake.kw)


# ------------------------------------------------------------------ flood
def test_flood_session(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("flood", route=WS_ROUTE, flood_bytes=5_000_000))
    handle, out = session(box, cmd="echo tail; exit 4")
    assert handle.wait(20) == 4
    assert len(out) == 5_000_000 + 5 and out.endswith(b"tail\n") and out.startswith(b"flood flood")


def test_flood_session_stops_on_kill(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("flood", route=WS_ROUTE, flood_bytes=1 << 40))
    handle, out = session(box, cmd="sleep 30")
    assert eventually(lambda: len(out) > 1_000_000)
    handle.kill("KILL")
    assert handle.wait(10) == 137


def test_flood_exec_stream(fake: Fake):
    box = fake.create()
    fake.faults.arm(Fault("flood", route=STREAM, flood_bytes=3_000_000))
    run = box.exec.stream("echo end")
    text = "".join(getattr(c, "data", "") for c in run)
    assert len(text) == 3_000_004 and text.endswith("end\n") and run.exit_code == 0


def test_every_fault_kind_is_exercised():
    names = {name for name in globals() if name.startswith("test_")}
    for kind in KINDS:
        assert any(kind.replace("-", "_") in name for name in names), f"no test for fault kind {kind}"
