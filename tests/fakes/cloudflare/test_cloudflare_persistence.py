"""Persistence: idle snapshots and restores, release, checkpoint, lost containers, delete, failed snapshots,
slow cold starts."""

from __future__ import annotations

import time

from fakes.cloudflare import CloudflareWorld

from .bridge_client import (
    Client,
    alive,
    error_of,
    exec_in_background,
    host_pid,
    make_server,
    new_id,
    stopped,
    wait_for,
)


def test_idle_workspaces_are_snapshotted_and_restored() -> None:
    srv = make_server(idle_s=0.4)
    try:
        cli = Client(srv)
        world = CloudflareWorld(srv.bridge)
        keep, gone = new_id("keep"), new_id("eph")
        cli.init(keep, persistent=True)
        cli.init(gone, persistent=False)
        pid = host_pid(
            srv.bridge.world,
            keep,
            int(cli.exec(keep, "echo kept > f; echo home > ~/h; sleep 30 >/dev/null 2>&1 & echo $!").output),
        )
        assert pid is not None and alive(pid)
        cli.exec(gone, "echo x > f")
        wait_for(lambda: stopped(cli, keep), what="the idle snapshot")
        assert world.sandboxes()[keep] == "paused"
        status = cli.status(keep).json()
        assert status["running"] is False and isinstance(status["snapshot_saved_at"], int)
        wait_for(lambda: world.sandboxes().get(gone) == "deleted", what="the ephemeral release")
        assert error_of(cli.status(gone)) == (404, "workspace_missing")
        assert not alive(pid), "the snapshot kept a process running"
        assert cli.exec(keep, "cat f ~/h").output == "kept\nhome\n"
        assert world.sandboxes()[keep] == "running"
        cli.close()
    finally:
        srv.stop()


def test_recent_activity_postpones_the_idle_snapshot() -> None:
    srv = make_server(idle_s=0.5)
    try:
        cli = Client(srv)
        sandbox = new_id()
        cli.init(sandbox)
        for _ in range(6):
            cli.exec(sandbox, "sleep 0.1")
            assert cli.status(sandbox).json()["running"] is True
        wait_for(lambda: stopped(cli, sandbox), what="the idle snapshot")
        cli.close()
    finally:
        srv.stop()


def test_release_of_a_persistent_workspace_snapshots_stops_and_restores(
    client: Client, sid: str, world: CloudflareWorld
) -> None:
    pid = host_pid(
        world.bridge.world, sid, int(client.exec(sid, "echo data > f; sleep 30 >/dev/null 2>&1 & echo $!").output)
    )
    assert pid is not None and alive(pid)
    assert client.post(f"/v1/sandboxes/{sid}/release").json() == {"ok": True}
    status = client.status(sid).json()
    assert status["running"] is False and status["snapshot_saved_at"] is not None
    assert world.sandboxes()[sid] == "paused"
    wait_for(lambda: not alive(pid), timeout=2, what="release to stop the background job")
    assert client.exec(sid, "cat f").output == "data\n"
    assert world.sandboxes()[sid] == "running"


def test_release_of_an_ephemeral_workspace_forgets_it(client: Client, world: CloudflareWorld) -> None:
    sandbox = new_id()
    client.init(sandbox, persistent=False)
    client.exec(sandbox, "echo x > f")
    assert client.post(f"/v1/sandboxes/{sandbox}/release").json() == {"ok": True}
    assert error_of(client.status(sandbox)) == (404, "workspace_missing")
    assert world.sandboxes()[sandbox] == "deleted"
    client.init(sandbox, persistent=False)
    assert client.exec(sandbox, "ls").output == ""


def test_release_without_a_workspace_is_a_no_op(client: Client) -> None:
    assert client.post(f"/v1/sandboxes/{new_id()}/release").json() == {"ok": True}


def test_checkpoint_saves_and_keeps_running(client: Client, sid: str) -> None:
    pid = client.exec(sid, "echo one > f; sleep 30 >/dev/null 2>&1 & echo $!").output.strip()
    assert client.post(f"/v1/sandboxes/{sid}/checkpoint").json() == {"ok": True}
    status = client.status(sid).json()
    assert status["running"] is True and status["snapshot_saved_at"] is not None
    assert client.exec(sid, f"kill -0 {pid} && echo alive; kill {pid}").output == "alive\n"


def test_checkpoint_refuses_ephemeral_workspaces(client: Client) -> None:
    sandbox = new_id()
    client.init(sandbox, persistent=False)
    assert error_of(client.post(f"/v1/sandboxes/{sandbox}/checkpoint")) == (409, "not_persistent")


def test_a_lost_container_without_snapshot_fails_closed(client: Client, sid: str, world: CloudflareWorld) -> None:
    client.exec(sid, "echo x > f")
    world.crash(sid)
    run = client.exec(sid, "echo should-not-run")
    assert run.status == 200 and run.types == ["error"] and run.error_code == "workspace_lost"
    assert world.sandboxes()[sid] == "error"
    assert client.status(sid).json()["running"] is False
    assert error_of(client.post(f"/v1/sandboxes/{sid}/checkpoint")) == (409, "workspace_lost")
    assert error_of(client.post(f"/v1/sandboxes/{sid}/release")) == (409, "workspace_lost")
    assert error_of(client.post(f"/v1/sandboxes/{sid}/read", {"path": "/workspace/f"})) == (409, "workspace_lost")
    assert client.exec(sid, "true").error_code == "workspace_lost", "the loss is not reported for good"


def test_a_lost_container_with_a_snapshot_is_restored(client: Client, sid: str, world: CloudflareWorld) -> None:
    client.exec(sid, "echo saved > a")
    client.post(f"/v1/sandboxes/{sid}/checkpoint")
    client.exec(sid, "echo unsaved > b")
    world.crash(sid)
    assert client.exec(sid, "cat a; ls").output == "saved\na\n"


def test_a_container_lost_mid_command_ends_the_stream_at_once(client: Client, sid: str, world: CloudflareWorld) -> None:
    future, _, _ = exec_in_background(client, sid, "echo go; sleep 30", timeout=60)
    started = time.monotonic()
    world.crash(sid)
    run = future.result(10)
    assert run.error_code == "workspace_lost" and "exit" not in run.types
    assert time.monotonic() - started < 2


def test_delete_requires_confirmation_and_forgets_everything(client: Client, sid: str) -> None:
    client.exec(sid, "echo x > f")
    client.post(f"/v1/sandboxes/{sid}/checkpoint")
    for body in ({}, {"confirm": "true"}, {"confirm": 1}):
        resp = client.http.request("DELETE", f"/v1/sandboxes/{sid}", json=body)
        assert error_of(resp) == (400, "confirmation_required")
    assert client.http.request("DELETE", f"/v1/sandboxes/{sid}", json={"confirm": True}).json() == {"ok": True}
    assert error_of(client.status(sid)) == (404, "workspace_missing")
    assert client.init(sid, persistent=False, cwd="/tmp").status_code == 200, "the old config survived"
    assert client.exec(sid, "ls").output == ""


def test_a_failed_snapshot_keeps_the_container_and_retries() -> None:
    srv = make_server(idle_s=0.3, alarm_retry_s=0.3)
    try:
        cli = Client(srv)
        sandbox = new_id()
        cli.init(sandbox)
        cli.exec(sandbox, "echo live > f")
        ws = srv.bridge.workspace(sandbox)
        ws.fail_snapshots = True
        assert error_of(cli.post(f"/v1/sandboxes/{sandbox}/release")) == (503, "snapshot_failed")
        time.sleep(1.0)  # idle alarms come and fail
        assert cli.status(sandbox).json() == {**cli.status(sandbox).json(), "running": True, "snapshot_saved_at": None}
        ws.fail_snapshots = False  # the next retry succeeds without any request
        wait_for(lambda: stopped(cli, sandbox), timeout=3, what="the retried snapshot")
        assert cli.exec(sandbox, "cat f").output == "live\n"
        cli.close()
    finally:
        srv.stop()


def test_a_slow_cold_start_is_startup_timeout() -> None:
    srv = make_server(startup_delay_s=0.5, startup_timeout_s=0.2)
    try:
        cli = Client(srv)
        sandbox = new_id()
        cli.init(sandbox)
        run = cli.exec(sandbox, "true")
        assert run.types[-1] == "error" and run.error_code == "startup_timeout"
        cli.close()
    finally:
        srv.stop()
