"""The hermes-exec supervisor: timeouts, cancel, client disconnects, the hard deadline, background output,
one foreground operation, replay protection."""

from __future__ import annotations

import json
import threading
import time

from fakes.cloudflare import BridgeServer, Settings
from fakes.cloudflare.supervisor import group_alive

from .bridge_client import (
    FAST,
    Client,
    error_of,
    exec_in_background,
    host_pid,
    in_background,
    make_server,
    new_id,
    rid,
    wait_for,
)


def _pgid(output: str) -> int:
    return int(output.split()[0])


def _group_in_box(client: Client, sid: str, pgid: int) -> bool:
    """Whether process group ``pgid``, numbered as the workspace numbers it, still has a process there."""
    return client.exec(sid, f"kill -0 -- -{pgid} 2>/dev/null && echo alive || echo gone").output == "alive\n"


def test_timeout_terms_the_group_and_exits_124(client: Client, sid: str) -> None:
    started = time.monotonic()
    run = client.exec(sid, "echo $$; sleep 30 & sleep 30", timeout=0.3)
    elapsed = time.monotonic() - started
    assert run.exit_code == 124
    assert elapsed < 0.3 + FAST.kill_grace_s + 0.5, elapsed
    assert not _group_in_box(client, sid, _pgid(run.output)), "the background job outlived the timeout"


def test_timeout_kills_a_group_that_ignores_sigterm(client: Client, sid: str) -> None:
    started = time.monotonic()
    run = client.exec(sid, "trap '' TERM; echo $$; sleep 30", timeout=0.3)
    elapsed = time.monotonic() - started
    assert run.exit_code == 124
    assert elapsed >= 0.3 + FAST.kill_grace_s * 0.9, "SIGKILL came before the grace"
    assert elapsed < 0.3 + FAST.kill_grace_s + 0.6, elapsed
    assert not _group_in_box(client, sid, _pgid(run.output))


def test_worker_timings_are_the_defaults() -> None:
    s = Settings()
    assert (s.kill_grace_s, s.drain_idle_s, s.drain_grace_s, s.hard_deadline_grace_s, s.heartbeat_s, s.idle_s) == (
        2.0,
        0.3,
        5.0,
        15.0,
        10.0,
        600.0,
    )


def test_cancel_during_exec_exits_143_and_is_idempotent(client: Client, sid: str) -> None:
    future, _, request_id = exec_in_background(client, sid, "echo $$; sleep 30")
    assert client.cancel(sid, request_id).json() == {"ok": True}
    run = future.result(10)
    assert run.exit_code == 143
    assert not _group_in_box(client, sid, _pgid(run.output))
    assert client.cancel(sid, request_id).json() == {"ok": True}
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": request_id, "command": "true"})) == (
        409,
        "duplicate_request",
    )


def test_cancel_escalates_to_sigkill(client: Client, sid: str) -> None:
    future, _, request_id = exec_in_background(client, sid, "trap '' TERM; echo $$; sleep 30")
    client.cancel(sid, request_id)
    run = future.result(10)
    assert run.exit_code == 143 and not _group_in_box(client, sid, _pgid(run.output))


def test_cancel_before_exec_refuses_that_exec(client: Client, sid: str, server: BridgeServer) -> None:
    request_id = rid()
    for _ in range(2):
        assert client.cancel(sid, request_id).json() == {"ok": True}
    resp = client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": request_id, "command": "touch ran"})
    assert error_of(resp) == (409, "command_cancelled")
    assert client.status(sid).json()["busy"] is False
    assert client.exec(sid, "test -e ran && echo ran || echo never").output == "never\n"


def test_cancel_needs_no_workspace(client: Client) -> None:
    assert client.cancel(new_id(), rid()).json() == {"ok": True}


def test_cancel_of_another_id_leaves_the_command_alone(client: Client, sid: str) -> None:
    future, _, _ = exec_in_background(client, sid, "echo go; sleep 0.4; echo done")
    client.cancel(sid, rid())
    run = future.result(10)
    assert run.exit_code == 0 and run.output == "go\ndone\n"


def test_cancel_during_a_cold_start_ends_as_command_cancelled() -> None:
    srv = make_server(startup_delay_s=0.6)
    try:
        cli = Client(srv)
        sandbox = new_id()
        cli.init(sandbox)
        request_id = rid()
        future = in_background(lambda: Client(srv).exec(sandbox, "touch ran", rid=request_id))
        wait_for(lambda: srv.world.get(sandbox) is not None, what="the cold start")
        cli.cancel(sandbox, request_id)
        run = future.result(10)
        assert run.types[-1] == "error" and run.error_code == "command_cancelled"
        assert "started" not in run.types
        assert cli.exec(sandbox, "ls").output == ""
        cli.close()
    finally:
        srv.stop()


def test_client_disconnect_cancels_the_command(client: Client, sid: str, server: BridgeServer) -> None:
    seen = threading.Event()
    with client.http.stream(
        "POST", f"/v1/sandboxes/{sid}/exec", json={"request_id": rid(), "command": "echo $$; sleep 30"}
    ) as resp:
        for line in resp.iter_lines():
            if json.loads(line)["type"] == "output":
                pgid = host_pid(
                    server.world, sid, _pgid(json.loads(line)["data"])
                )  # its leader runs: as the host sees it
                seen.set()
                break
    assert seen.is_set() and pgid is not None
    wait_for(lambda: not group_alive(pgid), what="the command to be stopped")
    wait_for(lambda: client.status(sid).json()["busy"] is False, what="the workspace to be free")


def test_hard_deadline_stops_a_wedged_command_and_keeps_the_workspace(
    client: Client, sid: str, server: BridgeServer
) -> None:
    client.exec(sid, "echo keep > kept")
    ws = server.bridge.workspace(sid)
    ws.stalled = True  # the supervisor neither enforces its timeout nor forwards signals
    try:
        started = time.monotonic()
        run = client.exec(sid, "echo $$; sleep 30", timeout=0.2)
        elapsed = time.monotonic() - started
    finally:
        ws.stalled = False
    assert run.types[-1] == "error" and run.error_code == "hard_timeout"
    assert 0.2 + FAST.hard_deadline_grace_s * 0.9 <= elapsed < 0.2 + FAST.hard_deadline_grace_s + 1.5, elapsed
    assert not _group_in_box(client, sid, _pgid(run.output))
    assert client.exec(sid, "cat kept").output == "keep\n"


def test_background_job_output_is_drained_briefly_and_the_job_survives(client: Client, sid: str) -> None:
    run = client.exec(sid, "(sleep 0.05; echo late) & echo $! > bg; echo now")
    assert run.exit_code == 0 and run.output == "now\nlate\n"
    started = time.monotonic()
    # The job ignores SIGPIPE: once the drain ends nobody reads its output, and a write would kill it.
    noisy = client.exec(sid, "(trap '' PIPE; while :; do echo tick; sleep 0.02; done) & echo $! > noisy; echo fg")
    elapsed = time.monotonic() - started
    assert noisy.exit_code == 0 and "fg" in noisy.output.splitlines() and "tick" in noisy.output
    assert FAST.drain_grace_s * 0.9 <= elapsed < FAST.drain_grace_s + 0.8, elapsed
    pid = int(client.exec(sid, "cat noisy").output)
    assert client.exec(sid, f"kill -0 {pid} && echo alive").output == "alive\n"
    client.exec(sid, f"kill {pid}")


def test_one_foreground_operation_per_workspace(client: Client, sid: str) -> None:
    future, _, request_id = exec_in_background(client, sid, "echo go; sleep 30")
    try:
        assert client.status(sid).json()["busy"] is True
        second = client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": "true"})
        assert error_of(second) == (409, "workspace_busy")
        assert error_of(client.init(sid)) == (409, "workspace_busy")
        assert error_of(client.post(f"/v1/sandboxes/{sid}/release")) == (409, "workspace_busy")
        assert error_of(client.post(f"/v1/sandboxes/{sid}/checkpoint")) == (409, "workspace_busy")
        assert error_of(client.post(f"/v1/sandboxes/{sid}/read", {"path": "/etc/hostname"})) == (409, "workspace_busy")
        assert error_of(client.http.request("DELETE", f"/v1/sandboxes/{sid}", json={"confirm": True})) == (
            409,
            "workspace_busy",
        )
        # another workspace is not affected
        other = new_id()
        client.init(other)
        assert client.exec(other, "true").exit_code == 0
    finally:
        client.cancel(sid, request_id)
    assert future.result(10).exit_code == 143


def test_the_workspace_is_free_as_soon_as_exit_is_seen(client: Client, sid: str) -> None:
    for _ in range(15):
        assert client.exec(sid, "true").exit_code == 0


def test_request_ids_are_replay_protected_over_the_last_64(client: Client, sid: str) -> None:
    first = rid()
    assert client.exec(sid, "echo 1 >> count", rid=first).exit_code == 0
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": first, "command": "true"})) == (
        409,
        "duplicate_request",
    )
    for _ in range(63):
        client.exec(sid, "true")
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": first, "command": "echo 1 >> count"})) == (
        409,
        "duplicate_request",
    )
    client.exec(sid, "true")  # the 64th newer id pushes the first one out
    assert client.exec(sid, "echo 1 >> count", rid=first).exit_code == 0
    assert client.exec(sid, "wc -l < count").output.strip() == "2"


def test_cancelled_ids_are_remembered_over_the_last_64(client: Client, sid: str) -> None:
    ids = [rid() for _ in range(65)]
    for request_id in ids:
        client.cancel(sid, request_id)
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": ids[1], "command": "true"})) == (
        409,
        "command_cancelled",
    )
    assert client.exec(sid, "true", rid=ids[0]).exit_code == 0
