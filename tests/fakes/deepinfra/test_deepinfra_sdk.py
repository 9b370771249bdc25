"""The DeepInfra fake through the real deepinfra 0.3.0 SDK, call by call: auth, errors, lifecycle, states."""

from __future__ import annotations

import time

import httpx
import pytest
from deepinfra import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    DeepInfraClient,
    NotFoundError,
    RateLimitError,
    Sandbox,
    SandboxFailedError,
)

from fakes.deepinfra import DeepInfraServer
from fakes.deepinfra.testing import Tenant, eventually, tenant


# ------------------------------------------------------------------ auth and error bodies
def test_bearer_auth_rejects_other_keys(fake: Tenant):
    stranger = DeepInfraClient(api_key="di_not_a_key", base_url=fake.server.base_url)
    with pytest.raises(AuthenticationError) as info:
        Sandbox.list(client=stranger)
    assert info.value.status_code == 401
    raw = fake.http("GET", "/v1/sandboxes", headers={"Authorization": "Basic abc"})
    assert raw.status_code == 401 and raw.json() == {"detail": {"error": "Missing bearer token"}}


def test_both_error_body_shapes(fake: Tenant):
    missing = fake.http("GET", "/v1/sandboxes/sb_nope")
    assert missing.status_code == 404 and missing.json() == {"detail": {"error": "Sandbox not found"}}
    sb = fake.create()
    outside = fake.http("GET", f"/v1/sandboxes/{sb.id}/fs/content", params={"path": "/etc/hostname"})
    assert outside.status_code == 400
    assert outside.json()["error"].startswith("ERR_PATH_OUTSIDE_WORKSPACE")
    with pytest.raises(NotFoundError, match="Sandbox not found"):
        Sandbox.from_id("sb_nope", client=fake.client)
    with pytest.raises(BadRequestError, match="ERR_PATH_OUTSIDE_WORKSPACE"):
        sb.fs.read("/etc/hostname")


def test_sandboxes_of_other_keys_are_invisible(fake: Tenant, server: DeepInfraServer):
    sb = fake.create()
    with tenant(server) as other:
        assert Sandbox.list(client=other.client) == []
        with pytest.raises(NotFoundError):
            Sandbox.from_id(sb.id, client=other.client)


# ------------------------------------------------------------------ create, list, catalog
def test_create_returns_id_and_tags_and_the_info_the_sdk_reads(fake: Tenant):
    reply = fake.http("POST", "/v1/sandboxes", json={"plan": "", "tags": {"task": "a"}, "timeout_seconds": 0})
    assert reply.status_code == 200
    body = reply.json()
    assert body["sandbox_id"].startswith("sb_") and body["tags"] == {"task": "a"}
    sb = Sandbox.from_id(body["sandbox_id"], client=fake.client)
    sb.wait_until_running(timeout=10)
    assert (sb.plan, sb.tags, sb.provider) == ("medium", {"task": "a"}, "kata-qemu")
    assert isinstance(sb.created_at, int) and sb.created_at > 1_600_000_000


def test_list_filters_tags_client_side_and_catalog_lists_plans(fake: Tenant):
    a = fake.create(tags={"task": "a", "kind": "x"})
    fake.create(tags={"task": "b"})
    assert [s.id for s in Sandbox.list(tags={"task": "a"}, client=fake.client)] == [a.id]
    assert len(fake.http("GET", "/v1/sandboxes").json()) == 2  # the server returns them all
    plans = {p.id: p for p in Sandbox.catalog(client=fake.client)}
    assert {"small", "medium", "large"} <= set(plans) and plans["medium"].ram_gb == 4


def test_unknown_plan_is_400(fake: Tenant):
    with pytest.raises(BadRequestError, match="Unknown plan 'huge'"):
        fake.create(plan="huge")
    assert fake.boxes() == []
    assert fake.create(plan="large").plan == "large"


def test_cap_of_five_active_sandboxes_is_429_in_the_real_shape(fake: Tenant):
    made = [fake.create(wait=False) for _ in range(5)]
    made[0].wait_until_running(timeout=10)
    made[0].stop()  # stopped sandboxes still count
    reply = fake.http("POST", "/v1/sandboxes", json={"plan": "", "tags": {}, "timeout_seconds": 0})
    assert reply.status_code == 429
    assert reply.json() == {"detail": {"error": "You have reached the maximum of 5 active sandboxes"}}
    with pytest.raises(RateLimitError):
        fake.create()
    made[1].terminate()
    assert fake.create().state == "running"


# ------------------------------------------------------------------ states
def _states(fake: Tenant, sandbox_id: str, until: str, timeout: float = 10.0) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    with httpx.Client(base_url=fake.server.base_url, headers={"Authorization": f"Bearer {fake.key}"}) as http:
        while time.monotonic() < deadline:
            state = http.get(f"/v1/sandboxes/{sandbox_id}").json().get("state", "gone")
            if not seen or seen[-1] != state:
                seen.append(state)
            if state == until:
                break
            time.sleep(0.01)
    return seen


def test_states_advance_asynchronously(fake: Tenant):
    # Each state lasts long enough to be seen by a poll on a loaded machine.
    fake.settings.create_delay_s = fake.settings.boot_delay_s = fake.settings.stop_delay_s = 0.6
    sb = fake.create(wait=False)
    assert sb.state == "creating"
    assert _states(fake, sb.id, "running") == ["creating", "starting", "running"]
    sb.stop(wait=False)
    assert _states(fake, sb.id, "stopped") == ["stopping", "stopped"]
    sb.start(wait=False)
    assert _states(fake, sb.id, "running") == ["starting", "running"]
    sb.stop()  # the SDK waits for "stopped"
    assert sb.state == "stopped"
    sb.start()
    assert sb.state == "running"


def test_terminate_shows_deleted_then_404(fake: Tenant):
    fake.settings.deleted_visible_s = 0.3
    sb = fake.create()
    sb.terminate()
    assert Sandbox.from_id(sb.id, client=fake.client).state == "deleted"
    with pytest.raises(NotFoundError):
        sb.terminate()
    assert eventually(lambda: fake.http("GET", f"/v1/sandboxes/{sb.id}").status_code == 404, 2)
    with Sandbox.from_id(fake.create().id, client=fake.client):
        pass  # the context manager terminates, and swallows "already gone"


def test_a_hook_makes_a_create_end_in_failed(fake: Tenant):
    fake.server.service.fail_next_creates(1)
    with pytest.raises(SandboxFailedError) as info:
        fake.create()
    assert info.value.sandbox_id and fake.box(info.value.sandbox_id).state == "failed"
    assert fake.create().state == "running", "the hook fires once"


def test_stop_and_start_conflicts(fake: Tenant):
    fake.settings.create_delay_s = 0.5
    sb = fake.create(wait=False)
    with pytest.raises(ConflictError, match="creating"):
        sb.stop(wait=False)
    sb.wait_until_running(timeout=10)
    sb.start()  # start on a running sandbox is a no-op
    sb.stop()
    sb.stop()  # and so is stop on a stopped one
    fake.server.service.fail(fake.box(sb.id))
    with pytest.raises(ConflictError, match="Sandbox is failed, cannot start"):
        sb.start(wait=False)


def test_exec_and_fs_on_a_sandbox_that_is_not_running_are_409(fake: Tenant):
    sb = fake.create()
    sb.stop()
    with pytest.raises(ConflictError, match="Sandbox is stopped, not running"):
        sb.exec("true")
    with pytest.raises(ConflictError):
        sb.fs.write("/workspace/a", b"x")
    with pytest.raises(ConflictError):
        sb.fs.read("/workspace/a")
    raw = fake.http("POST", f"/v1/sandboxes/{sb.id}/exec", json={"command": ["true"], "timeout_seconds": 0})
    assert raw.json() == {"detail": {"error": "Sandbox is stopped, not running"}}


def test_only_the_workspace_survives_a_stop(fake: Tenant):
    sb = fake.create()
    setup = sb.exec(
        "bash",
        "-c",
        "echo w > /workspace/kept; echo r > /root/lost; echo t > /tmp/lost; nohup sleep 300 >/dev/null 2>&1 & echo $!",
    )
    pid = int(setup.stdout.strip())
    sb.stop()
    sb.start()
    # A killed orphan may linger as a zombie until its new parent reaps it: that counts as dead.
    after = sb.exec(
        "bash",
        "-c",
        "cat /workspace/kept; ls -A /root /tmp; "
        f"s=$(sed 's/^.*) //' /proc/{pid}/stat 2>/dev/null | cut -c1); "
        '[ -n "$s" ] && [ "$s" != Z ] && echo alive || echo dead',
    )
    assert after.stdout.split() == ["w", "/root:", "/tmp:", "dead"], after.stdout
