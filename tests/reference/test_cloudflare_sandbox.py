"""cloudflare_sandbox against the bridge fake: every behaviour of the seed README, and the extension.

Each test drives the real backend (real HTTP, real NDJSON streams, real bash
in the box world) through the fake's BridgeServer, one offering the protocol
extensions and one that is a plain v1 Worker, and scripts faults through it.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.cloudflare import BridgeServer, CloudflareWorld, Settings
from fakes.cloudflare.settings import EXTENSIONS, ROUTE_EXEC
from fakes.faults import Fault

pytestmark = pytest.mark.usefixtures("builtin_host")

TIMINGS = {
    "heartbeat_s": 0.2,
    "kill_grace_s": 0.3,
    "drain_idle_s": 0.1,
    "drain_grace_s": 0.5,
    "hard_deadline_grace_s": 0.3,
    "failure_grace_s": 0.5,
    "idle_s": 120.0,
    "alarm_retry_s": 0.5,
}


class Recording:
    """ASGI wrapper that remembers every request's path and headers."""

    def __init__(self, app: Any):
        self.app = app
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            self.requests.append((scope["method"], scope["path"], headers))
        await self.app(scope, receive, send)

    def paths(self, suffix: str) -> list[str]:
        return [p for _, p, _ in self.requests if p.endswith(suffix)]


def serve(**overrides: Any) -> tuple[BridgeServer, Recording]:
    server = BridgeServer(settings=Settings.quick(**{**TIMINGS, **overrides}))
    recording = Recording(server.app)
    server._loop.app = recording  # serve through the recorder
    server.start()
    return server, recording


@pytest.fixture(scope="module")
def ext() -> Iterator[tuple[BridgeServer, Recording]]:
    server, recording = serve(extensions=EXTENSIONS)
    yield server, recording
    server.stop()


@pytest.fixture(scope="module")
def v1() -> Iterator[tuple[BridgeServer, Recording]]:
    server, recording = serve()
    yield server, recording
    server.stop()


def point(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, server: BridgeServer, **extra: str) -> None:
    home = tmp_path / "hermes"
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HERMES_HOME", str(home))
    for name in [k for k in os.environ if k.startswith("HERMES_CF_")]:
        monkeypatch.delenv(name)
    for name, value in {**server.exports(), **extra}.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def provider() -> Any:
    from reference.cloudflare_sandbox.provider import CloudflareSandboxProvider

    return CloudflareSandboxProvider()


def make(provider: Any, task_id: str | None = None, *, persistent: bool = False, timeout: int = 30) -> Any:
    return provider.create_environment(
        cwd="/workspace",
        timeout=timeout,
        task_id=task_id or f"t-{uuid.uuid4().hex[:8]}",
        container_config={"container_persistent": persistent},
    )


@pytest.fixture
def on_ext(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ext: tuple[BridgeServer, Recording]) -> BridgeServer:
    point(monkeypatch, tmp_path, ext[0])
    return ext[0]


@pytest.fixture
def on_v1(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, v1: tuple[BridgeServer, Recording]) -> BridgeServer:
    point(monkeypatch, tmp_path, v1[0])
    return v1[0]


def world(server: BridgeServer) -> CloudflareWorld:
    return CloudflareWorld(server.bridge)


def run_handle(env: Any, command: str, *, timeout: int = 10, stdin: str | None = None) -> tuple[int | None, str]:
    """Drive _run_bash without Hermes's wait loop: every byte until EOF, then the return code."""
    handle = env._run_bash(command, timeout=timeout, stdin_data=stdin)
    text = handle.stdout.read()
    return handle.wait(30), text


# ---------------------------------------------------------------------------- persistence
def test_idle_snapshot_then_restore_and_release_on_cleanup(on_ext, provider):
    env = make(provider, "session:persist", persistent=True)
    sid = env.workspace_id
    assert env.execute("echo kept > /workspace/f; echo home > ~/h")["returncode"] == 0
    world(on_ext).idle_now(sid)  # the Worker's idle alarm: snapshot, then stop the container
    assert world(on_ext).sandboxes()[sid] == "paused"
    assert env.execute("cat /workspace/f ~/h")["output"] == "kept\nhome\n"
    assert world(on_ext).sandboxes()[sid] == "running"
    env.cleanup()
    assert world(on_ext).sandboxes()[sid] == "paused", "cleanup did not release (snapshot) the workspace"
    again = make(provider, "session:persist", persistent=True)
    assert again.workspace_id == sid
    assert again.execute("cat /workspace/f")["output"] == "kept\n"
    again.cleanup()


def test_ephemeral_workspaces_are_unique_and_deleted(on_ext, provider):
    first, second = make(provider, "session:eph"), make(provider, "session:eph")
    assert first.workspace_id != second.workspace_id and first._session_scoped and not first._persistent
    first.cleanup()
    assert world(on_ext).sandboxes()[first.workspace_id] == "deleted"
    assert second.execute("echo alive")["output"] == "alive\n"
    second.cleanup()
    assert second.execute("echo no")["returncode"] == 1  # refused after cleanup
    second.cleanup()  # idempotent


def test_named_workspace_is_shared_across_task_ids(on_ext, provider, monkeypatch):
    monkeypatch.setenv("HERMES_CF_WORKSPACE", "my-project")
    one, two = make(provider, "a", persistent=True), make(provider, "b", persistent=True)
    assert one.workspace_id == two.workspace_id
    monkeypatch.setenv("HERMES_CF_NAMESPACE", "elsewhere")
    three = make(provider, "a", persistent=True)
    assert three.workspace_id != one.workspace_id
    for env in (one, two, three):
        env.cleanup()


def test_prompt_probe_never_reuses_or_snapshots_a_workspace(on_ext, provider):
    env = make(provider, "prompt-backend-probe", persistent=True)
    other = make(provider, "prompt-backend-probe", persistent=True)
    assert env.workspace_id != other.workspace_id and not env._persistent and not env._session_scoped
    assert env.execute("uname -s", timeout=4)["returncode"] == 0
    env.cleanup()
    other.cleanup()
    states = world(on_ext).sandboxes()
    assert states[env.workspace_id] == states[other.workspace_id] == "deleted"


def test_workspace_lost_is_reported_and_never_replaced(on_ext, provider):
    env = make(provider)
    sid = env.workspace_id
    assert env.execute("true")["returncode"] == 0
    before = set(world(on_ext).sandboxes())
    world(on_ext).fail(sid)  # the container is gone and no snapshot exists
    for _ in range(2):
        result = env.execute("touch ~/should-not-run")
        assert result["returncode"] == 1
        assert "workspace_lost" in result["output"] and "error state" in result["output"]
    assert set(world(on_ext).sandboxes()) == before and world(on_ext).sandboxes()[sid] == "error"
    env.cleanup()


def test_deleted_workspace_is_created_again_once(on_ext, provider):
    env = make(provider)
    env.execute("echo old > ~/old")
    world(on_ext).delete(env.workspace_id)
    first = env.execute("test -e ~/old && echo stale || echo fresh")
    assert first["output"] == "fresh\n" and first.get("environment_recreated") is True
    assert not env.execute("true").get("environment_recreated")
    env.cleanup()


# ---------------------------------------------------------------------------- cancel, busy, timeouts
def test_cancel_reaches_the_worker_before_the_exec(on_ext, provider):
    env = make(provider)
    marker = f"/tmp/cancelled-{uuid.uuid4().hex}"
    on_ext.faults.arm(Fault("latency", route=ROUTE_EXEC, box=env.workspace_id, delay_s=0.8))
    handle = env._run_bash(f"touch {marker}", timeout=10)
    time.sleep(0.3)  # the exec is on its way, held up in front of the Worker
    handle.kill()
    assert handle.wait(10) == 143
    ws = on_ext.bridge.find(env.workspace_id)
    assert ws is not None and len(ws.cancelled) == 1, "the cancel did not reach the Worker"
    assert env.execute(f"test -e {marker} && echo ran || echo never")["output"] == "never\n"
    env.cleanup()


def test_timeout_cancels_the_command_in_the_worker(on_ext, provider):
    env = make(provider)
    started = time.monotonic()
    result = env.execute("echo before; sleep 30", timeout=1)
    assert result["returncode"] == 124 and result["output"].startswith("before")
    assert time.monotonic() - started < 3
    assert env.execute("echo after", timeout=5)["output"] == "after\n"
    env.cleanup()


def test_hard_timeout_is_reported(on_ext, provider, monkeypatch):
    from reference.cloudflare_sandbox import command

    monkeypatch.setattr(command, "SERVER_TIMEOUT_MARGIN_S", 0.0)
    env = make(provider)
    on_ext.bridge.find(env.workspace_id).stalled = True  # a wedged supervisor ignores its timeout
    try:
        code, text = run_handle(env, "sleep 30", timeout=1)
    finally:
        on_ext.bridge.find(env.workspace_id).stalled = False
    assert code == 124 and "hard deadline" in text
    assert env.execute("echo still-here")["output"] == "still-here\n"
    env.cleanup()


def test_concurrent_execs_overlap_with_the_extension(on_ext, provider):
    env = make(provider)
    assert env.extensions == ["concurrent-exec", "large-output"]
    flag = f"/tmp/flag-{uuid.uuid4().hex}"
    waiter: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: waiter.update(env.execute(f"while [ ! -e {flag} ]; do sleep 0.05; done; echo got", timeout=10))
    )
    thread.start()
    time.sleep(0.3)
    assert env.execute(f"touch {flag}", timeout=5)["returncode"] == 0  # runs while the waiter holds a stream
    thread.join(10)
    assert waiter["output"] == "got\n", "the second command could not run next to the first"
    results: dict[int, dict[str, Any]] = {}
    started = time.monotonic()
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, env.execute(f"sleep 0.5; exit {i}")))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert [results[i]["returncode"] for i in range(4)] == [0, 1, 2, 3]
    assert time.monotonic() - started < 1.8, "concurrent execs were serialised"
    env.cleanup()


def test_v1_worker_gets_one_exec_at_a_time_and_no_busy_errors(on_v1, provider, v1):
    env = make(provider)
    assert env.extensions == []
    results: dict[int, dict[str, Any]] = {}
    started = time.monotonic()
    threads = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, env.execute(f"sleep 0.3; echo {i}")))
        for i in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert [results[i]["output"] for i in range(4)] == ["0\n", "1\n", "2\n", "3\n"]
    assert time.monotonic() - started >= 1.2, "execs overlapped on a v1 Worker"
    # Another client holds the workspace: 409 workspace_busy means "not run", so the command waits.
    with (
        httpx.Client(base_url=on_v1.base_url, headers={"Authorization": f"Bearer {on_v1.token}"}) as raw,
        raw.stream(
            "POST",
            f"/v1/sandboxes/{env.workspace_id}/exec",
            json={"request_id": uuid.uuid4().hex, "command": "sleep 0.6"},
        ) as held,
    ):
        assert held.status_code == 200
        result = env.execute("echo waited", timeout=10)
        held.read()
    assert result["output"] == "waited\n"
    # What a v1 Worker cannot give: a command that waits for another one to act only times out.
    flag = f"/tmp/flag-{uuid.uuid4().hex}"
    waiter: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: waiter.update(env.execute(f"while [ ! -e {flag} ]; do sleep 0.05; done; echo got", timeout=1))
    )
    thread.start()
    time.sleep(0.2)
    assert env.execute(f"touch {flag}", timeout=5)["returncode"] == 0
    thread.join(10)
    assert waiter["returncode"] == 124
    env.cleanup()


# ---------------------------------------------------------------------------- output and stdin
def test_output_limit_is_an_error_never_a_truncation(on_v1, provider):
    env = make(provider)
    result = env.execute("head -c 2500000 /dev/zero | tr '\\0' x", timeout=30)
    assert result["returncode"] == 1
    assert "limit of 2,000,000 characters" in result["output"] and "not a truncated result" in result["output"]
    assert result["output"].count("x") <= 2_000_000
    env.cleanup()


def test_large_output_extension_raises_the_limit(on_ext, provider):
    env = make(provider)
    result = env.execute("head -c 2500000 /dev/zero | tr '\\0' x", timeout=30)
    assert result["returncode"] == 0 and result["output"] == "x" * 2_500_000
    env.cleanup()


def test_raised_limit_is_still_an_error(monkeypatch, tmp_path, provider):
    server, _ = serve(extensions=EXTENSIONS, large_output_units=3_000_000)
    try:
        point(monkeypatch, tmp_path, server)
        env = make(provider)
        result = env.execute("head -c 3500000 /dev/zero | tr '\\0' x", timeout=30)
        assert result["returncode"] == 1 and "limit of 3,000,000 characters" in result["output"]
        env.cleanup()
    finally:
        server.stop()


def test_stdin_of_every_shape_arrives(on_v1, provider, v1):
    env = make(provider)
    recording = v1[1]
    from reference.cloudflare_sandbox import payload

    cases = {
        "text": "héllo 🚀\r\n",
        "nul": "a\x00b\x1b[0m",
        "undecodable": b"\xff\xfe ok".decode("utf-8", "surrogateescape"),
        "large": "kit 'q' $HOME ü\n" * 200_000,
    }
    for name, data in cases.items():
        raw = data.encode("utf-8", "surrogateescape")
        before = len(recording.paths("/exec"))
        result = env.execute("sha256sum", stdin_data=data, timeout=30)
        assert result["output"].split()[0] == hashlib.sha256(raw).hexdigest(), name
        sent = len(recording.paths("/exec")) - before
        expected = 1 if name != "large" else math.ceil(len(raw) / payload.STAGE_CHUNK) + 1  # uploads + the command
        assert sent == expected, f"{name}: {sent} requests"
    assert env.execute("ls /tmp | grep -c hermes-stdin || true")["output"].strip() == "0"
    payload = "y" * (100 * 1024)
    assert env.execute(f"v='{payload}'; echo ${{#v}}")["output"] == f"{len(payload)}\n"
    env.cleanup()


def test_stdin_over_the_staging_limit_fails_cleanly(on_ext, provider, monkeypatch):
    from reference.cloudflare_sandbox import payload

    monkeypatch.setattr(payload, "MAX_STAGED_BYTES", 1024 * 1024)
    env = make(provider)
    started = time.monotonic()
    result = env.execute("cat > /dev/null; echo ran", stdin_data="z" * (2 * 1024 * 1024), timeout=10)
    assert time.monotonic() - started < 2
    assert result["returncode"] == 1 and "did not run" in result["output"] and "MiB" in result["output"]
    env.cleanup()


# ---------------------------------------------------------------------------- the wire
def test_dropped_connection_may_have_run_and_is_not_retried(on_ext, provider, ext):
    env = make(provider)
    counter = f"/tmp/count-{uuid.uuid4().hex}"
    recording = ext[1]
    before = len(recording.paths("/exec"))
    cancels = sum(1 for _, p, _ in recording.requests if "/cancel/" in p)
    # Cut the body after the started event and the first output, before the exit event.
    on_ext.faults.arm(Fault("drop", route=ROUTE_EXEC, box=env.workspace_id, after_bytes=110))
    result = env.execute(f"echo x >> {counter}; echo started; sleep 0.3; echo done", timeout=10)
    assert (
        result["returncode"] == 1 and "may have run" in result["output"] and "nothing was retried" in result["output"]
    )
    assert result["output"].startswith("started\n")
    assert len(recording.paths("/exec")) - before == 1, "the command was sent again"
    assert sum(1 for _, p, _ in recording.requests if "/cancel/" in p) == cancels + 1, "no best-effort cancel"
    assert env.execute(f"wc -l < {counter}")["output"].strip() == "1"
    env.cleanup()


def test_requests_carry_the_named_agent_and_access_headers(monkeypatch, tmp_path, ext, provider):
    server, recording = ext
    point(
        monkeypatch, tmp_path, server, HERMES_CF_ACCESS_CLIENT_ID="cid.access", HERMES_CF_ACCESS_CLIENT_SECRET="s" * 40
    )
    before = len(recording.requests)
    env = make(provider)
    env.execute("true")
    env.cleanup()
    seen = recording.requests[before:]
    assert {p.rsplit("/", 1)[-1] for _, p, _ in seen} >= {"health", "exec", "release"}
    for _, path, headers in seen:
        assert headers["cf-access-client-id"] == "cid.access" and headers["cf-access-client-secret"] == "s" * 40, path
        assert headers["user-agent"].startswith("hermes-backend-kit-cloudflare-sandbox/")
        assert headers["accept"] == "application/json"
        assert headers["authorization"] == f"Bearer {server.token}"


def test_the_token_never_reaches_the_container_logs_or_errors(on_ext, provider, caplog, monkeypatch):
    token = on_ext.token
    secret = "access-secret-" + "q" * 30
    monkeypatch.setenv("HERMES_CF_ACCESS_CLIENT_ID", "cid")
    monkeypatch.setenv("HERMES_CF_ACCESS_CLIENT_SECRET", secret)
    with caplog.at_level(logging.DEBUG):
        env = make(provider)
        dump = env.execute("env; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")["output"]
        # A Worker (or proxy) that echoes the token in its error text: only the code is kept.
        on_ext.faults.arm(
            Fault("status", route=ROUTE_EXEC, box=env.workspace_id, status=500, message=f"boom Bearer {token} {secret}")
        )
        refused = env.execute("true")["output"]
        world(on_ext).fail(env.workspace_id)
        lost = env.execute("true")["output"]
        env.cleanup()
        on_ext.bridge.token = "w" * 48  # the token no longer matches
        try:
            with pytest.raises(Exception) as failed:
                make(provider)
        finally:
            on_ext.bridge.token = token
    for text in (dump, refused, lost, str(failed.value), caplog.text):
        assert token not in text and secret not in text
    assert "HERMES_CF_TOKEN" not in dump
    assert "unauthorized" in str(failed.value) and "HERMES_CF_TOKEN" in str(failed.value)


# ---------------------------------------------------------------------------- settings
@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        (
            {"HERMES_CF_ENDPOINT": "https://w.example.workers.dev/v1"},
            "HERMES_CF_ENDPOINT must be the Worker's origin only",
        ),
        ({"HERMES_CF_ENDPOINT": "http://w.example.workers.dev"}, "use https://"),
        ({"HERMES_CF_ENDPOINT": "https://user:pw@w.example.workers.dev"}, "HERMES_CF_ENDPOINT contains credentials"),
        ({"HERMES_CF_TOKEN": "short-token"}, "HERMES_CF_TOKEN is too short (11 characters"),
        ({"HERMES_CF_TOKEN": "has space " * 5}, "HERMES_CF_TOKEN contains whitespace"),
        ({"HERMES_CF_ACCESS_CLIENT_ID": "only-id"}, "only HERMES_CF_ACCESS_CLIENT_ID is set"),
        ({"HERMES_CF_ACCESS_CLIENT_SECRET": "x" * 40}, "set HERMES_CF_ACCESS_CLIENT_ID too"),
        ({"HERMES_CF_INSTANCE": "huge"}, "HERMES_CF_INSTANCE 'huge' is not an instance type"),
        ({"HERMES_CF_IMAGE": "bad image"}, "HERMES_CF_IMAGE 'bad image' is not an image name"),
    ],
)
def test_configuration_errors_name_the_variable_and_the_fix(monkeypatch, tmp_path, provider, variables, expected):
    for name in [k for k in os.environ if k.startswith("HERMES_CF_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    for name, value in {"HERMES_CF_ENDPOINT": "http://127.0.0.1:9", "HERMES_CF_TOKEN": "t" * 40, **variables}.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(Exception) as failed:
        make(provider)
    assert expected in str(failed.value)
    assert provider.check_requirements({}) is False
    status, detail = provider.probe()
    assert status == "needs_setup" and expected in detail
    for value in variables.values():
        if len(value) >= 32:
            assert value not in str(failed.value)


def test_endpoint_origins(monkeypatch):
    from reference.cloudflare_sandbox.settings import validate_endpoint

    assert validate_endpoint("https://w.example.workers.dev/") == "https://w.example.workers.dev"
    assert validate_endpoint("http://localhost:8787") == "http://localhost:8787"
    assert validate_endpoint("http://[::1]:8787") == "http://[::1]:8787"


def test_secret_scope_is_read_without_fallback(on_ext, provider, monkeypatch):
    scope = __import__("agent.secret_scope", fromlist=["x"])
    monkeypatch.setattr(scope, "_multiplex", True)  # multiplexing with no scope: reads must fail closed
    with pytest.raises(Exception, match="secret scope"):
        make(provider)
    assert provider.is_available() is False
