"""Bridge protocol v1 against the running fake, through a small client written here.

Every rule of the Worker the fake reproduces is driven over HTTP: auth, the
router, init, the NDJSON exec stream, the limits at and over each boundary,
supervisor semantics, persistence, /read and every scripted fault kind.
Timings are shortened through Settings so the module stays fast.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from fakes.cloudflare import BridgeServer, CloudflareWorld, Settings
from fakes.cloudflare import protocol as cf_protocol
from fakes.cloudflare.settings import (
    MAX_BODY_BYTES,
    MAX_COMMAND_BYTES,
    MAX_OUTPUT_UNITS,
    MAX_STDIN_BYTES,
    ROUTE_EXEC,
    ROUTE_HEALTH,
    ROUTE_INIT,
    ROUTE_STATUS,
)
from fakes.cloudflare.supervisor import group_alive
from fakes.faults import Fault

FAST = Settings.quick(heartbeat_s=0.2, kill_grace_s=0.3, drain_idle_s=0.3, drain_grace_s=0.8,
                      hard_deadline_grace_s=0.6, failure_grace_s=1.0, idle_s=120.0, alarm_retry_s=0.5)


# ---------------------------------------------------------------------------- the client
@dataclass
class Run:
    """One exec: the HTTP answer and, for a stream, every event."""

    status: int
    headers: httpx.Headers
    raw: bytes = b""
    events: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None  # the JSON error body of a non-stream answer

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    @property
    def output(self) -> str:
        return "".join(e["data"] for e in self.events if e["type"] == "output")

    @property
    def exit_code(self) -> int | None:
        last = self.events[-1] if self.events else {}
        return last.get("exit_code") if last.get("type") == "exit" else None

    @property
    def error_code(self) -> str | None:
        if self.error is not None:
            return self.error["error"]["code"]
        last = self.events[-1] if self.events else {}
        return last.get("code") if last.get("type") == "error" else None


class Client:
    def __init__(self, server: BridgeServer, token: str | None = None):
        self.server = server
        self.token = server.token if token is None else token
        self.http = httpx.Client(base_url=server.base_url, timeout=30,
                                 headers={"Authorization": f"Bearer {self.token}"})

    def close(self) -> None:
        self.http.close()

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return self.http.post(path, json={} if body is None else body, **kw)

    def init(self, sid: str, persistent: bool = True, **config: Any) -> httpx.Response:
        return self.post(f"/v1/sandboxes/{sid}", {"persistent": persistent, **config})

    def status(self, sid: str) -> httpx.Response:
        return self.http.get(f"/v1/sandboxes/{sid}")

    def cancel(self, sid: str, rid: str) -> httpx.Response:
        return self.post(f"/v1/sandboxes/{sid}/cancel/{rid}")

    def exec(self, sid: str, command: str, *, rid: str | None = None,
             on_event: Callable[[dict[str, Any]], None] | None = None, **fields: Any) -> Run:
        body = {"request_id": rid or uuid.uuid4().hex, "command": command, **fields}
        with self.http.stream("POST", f"/v1/sandboxes/{sid}/exec", json=body) as resp:
            run = Run(resp.status_code, resp.headers)
            if resp.status_code != 200:
                resp.read()
                run.error = resp.json()
                return run
            buffer = b""
            for chunk in resp.iter_raw():
                run.raw += chunk
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    event = json.loads(line)
                    run.events.append(event)
                    if on_event is not None:
                        on_event(event)
            assert not buffer, f"the stream ended inside a line: {buffer[:100]!r}"
        return run


def new_id(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def rid() -> str:
    return uuid.uuid4().hex


@pytest.fixture(scope="module")
def server() -> Iterator[BridgeServer]:
    with BridgeServer(settings=FAST) as srv:
        yield srv


@pytest.fixture
def client(server: BridgeServer) -> Iterator[Client]:
    server.faults.clear()
    cli = Client(server)
    yield cli
    cli.close()
    server.faults.clear()


@pytest.fixture
def world(server: BridgeServer) -> CloudflareWorld:
    return CloudflareWorld(server.bridge)


@pytest.fixture
def sid(client: Client) -> str:
    """An initialised persistent workspace."""
    sandbox = new_id()
    assert client.init(sandbox).status_code == 200
    return sandbox


def make_server(**overrides: Any) -> BridgeServer:
    return BridgeServer(settings=Settings.quick(**{**_fast_fields(), **overrides})).start()


def _fast_fields() -> dict[str, Any]:
    return {name: getattr(FAST, name) for name in FAST.__dataclass_fields__}


def error_of(resp: httpx.Response) -> tuple[int, str]:
    assert resp.headers.get("cache-control") == "no-store", resp.headers
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return resp.status_code, body["error"]["code"]


def stopped(client: Client, sid: str) -> bool:
    """The container is stopped and the stop (a lifecycle transition) has finished."""
    status = client.status(sid).json()
    return status["running"] is False and status["busy"] is False


def in_background(fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


# ---------------------------------------------------------------------------- auth
def test_health_reports_protocol_version_without_starting_compute(client: Client, server: BridgeServer) -> None:
    before = len(server.world.boxes())
    resp = client.http.get("/health")
    assert resp.status_code == 200
    assert resp.json() == {"ok": True, "protocol": 1}
    assert resp.headers["cache-control"] == "no-store"
    assert len(server.world.boxes()) == before


@pytest.mark.parametrize("header", [None, "Bearer wrong-token", "bearer {token}", "Bearer  {token}",
                                    "Basic {token}", "{token}", "Bearer {token}x", "Bearer {token}, Bearer x"])
def test_wrong_credentials_are_unauthorized(server: BridgeServer, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header.format(token=server.token)}
    for method, path in (("GET", "/health"), ("POST", "/v1/sandboxes/x"), ("GET", "/nowhere")):
        resp = httpx.request(method, server.base_url + path, headers=headers, content=b"not json")
        assert error_of(resp) == (401, "unauthorized"), (method, path)


def test_an_authorization_header_over_4096_characters_is_refused(server: BridgeServer) -> None:
    good = server.bridge.token
    try:
        for length, status in ((4096 - 7, 200), (4097 - 7, 401)):  # "Bearer " is 7 characters
            server.bridge.token = "k" * length
            resp = httpx.get(server.base_url + "/health", headers={"Authorization": "Bearer " + "k" * length})
            assert resp.status_code == status, length
    finally:
        server.bridge.token = good


def test_unauthorized_requests_touch_no_workspace(server: BridgeServer) -> None:
    sandbox = new_id()
    resp = httpx.post(f"{server.base_url}/v1/sandboxes/{sandbox}", json={"persistent": True},
                      headers={"Authorization": "Bearer nope"})
    assert resp.status_code == 401
    assert server.bridge.find(sandbox) is None


@pytest.mark.parametrize("secret", [None, "", "s" * 31, "s" * 20 + " " + "s" * 20, "s" * 40 + "\n"])
def test_missing_or_weak_server_secret_is_not_configured(server: BridgeServer, secret: str | None) -> None:
    good = server.bridge.token
    server.bridge.token = secret
    try:
        for token in (good, "anything"):
            for path in ("/health", "/v1/sandboxes/abc"):
                resp = httpx.get(server.base_url + path, headers={"Authorization": f"Bearer {token}"})
                assert error_of(resp) == (503, "not_configured")
    finally:
        server.bridge.token = good


def test_a_32_character_secret_is_enough(server: BridgeServer) -> None:
    good = server.bridge.token
    server.bridge.token = "k" * 32
    try:
        assert httpx.get(server.base_url + "/health", headers={"Authorization": "Bearer " + "k" * 32}).status_code == 200
    finally:
        server.bridge.token = good


def test_tokens_are_compared_as_fixed_length_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = cf_protocol.hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(cf_protocol.hmac, "compare_digest", spy)
    secret = "q" * 40
    assert cf_protocol.authorized(f"Bearer {secret}", secret)
    assert not cf_protocol.authorized("Bearer short", secret)
    assert [(len(a), len(b)) for a, b in seen] == [(32, 32), (32, 32)]
    assert seen[0][1] == hashlib.sha256(f"Bearer {secret}".encode()).digest()


# ---------------------------------------------------------------------------- router
@pytest.mark.parametrize("path", [
    "/", "/v1", "/v1/sandboxes", "/v1/sandboxes/", "/v2/sandboxes/abc", "/v1/sandboxes/abc/unknown",
    "/v1/sandboxes/abc/exec/more", "/v1/sandboxes/abc/cancel", "/v1/sandboxes/abc/cancel/xyz",
    "/v1/sandboxes/abc/cancel/" + "A" * 32, "/v1/sandboxes/abc/cancel/" + "a" * 31,
    # bad sandbox ids
    "/v1/sandboxes/A!", "/v1/sandboxes/-abc", "/v1/sandboxes/Abc", "/v1/sandboxes/a_b",
    "/v1/sandboxes/" + "a" * 64, "/v1/sandboxes/a%62c",
    # any query string
    "/v1/sandboxes/abc?x=1", "/v1/sandboxes/abc/exec?a", "/v1/sandboxes/abc/release?=",
])
def test_unknown_routes_ids_and_query_strings_are_404(client: Client, path: str) -> None:
    resp = client.http.request("POST", path, json={"persistent": True})
    assert error_of(resp) == (404, "not_found"), path


def test_health_ignores_a_query_string(client: Client) -> None:
    # As in the Worker: /health is matched on the path alone.
    assert client.http.get("/health?probe=1").json() == {"ok": True, "protocol": 1}


def test_query_string_on_a_status_route_is_404(client: Client, sid: str) -> None:
    assert error_of(client.http.get(f"/v1/sandboxes/{sid}", params={"a": "b"})) == (404, "not_found")
    assert client.status(sid).status_code == 200


def test_longest_valid_id_is_routed(client: Client) -> None:
    longest = "a" + "-" * 61 + "z"
    assert error_of(client.status(longest)) == (404, "workspace_missing")
    assert client.init(longest).status_code == 200


@pytest.mark.parametrize("method,path", [
    ("GET", "/v1/sandboxes/abc/exec"), ("GET", "/v1/sandboxes/abc/release"), ("DELETE", "/v1/sandboxes/abc/exec"),
    ("PUT", "/v1/sandboxes/abc"), ("PATCH", "/v1/sandboxes/abc"), ("HEAD", "/v1/sandboxes/abc/checkpoint"),
    ("GET", "/v1/sandboxes/abc/cancel/" + "a" * 32), ("PUT", "/v1/sandboxes/abc/read"),
])
def test_wrong_methods_are_405(client: Client, method: str, path: str) -> None:
    resp = client.http.request(method, path)
    assert resp.status_code == 405
    if method != "HEAD":
        assert error_of(resp) == (405, "method_not_allowed")


def test_health_is_get_only(client: Client) -> None:
    assert error_of(client.post("/health")) == (404, "not_found")


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "Application/JSON"])
def test_non_json_bodies_are_415(client: Client, content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    for path in ("/v1/sandboxes/abc", "/v1/sandboxes/abc/release", "/v1/sandboxes/abc/cancel/" + "a" * 32):
        resp = client.http.post(path, content=b'{"persistent":true}', headers=headers)
        assert error_of(resp) == (415, "content_type"), (path, content_type)


def test_json_content_type_with_parameters_is_accepted(client: Client) -> None:
    resp = client.http.post(f"/v1/sandboxes/{new_id()}", content=b'{"persistent":true}',
                            headers={"Content-Type": "application/json; charset=utf-8"})
    assert resp.status_code == 200


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b"1", b'"s"', b"null", b'{"persistent":NaN}',
                                  b'{"persistent":true,"cwd":"\xff"}', b'{"persistent":true'])
def test_invalid_json_is_400(client: Client, body: bytes) -> None:
    resp = client.http.post(f"/v1/sandboxes/{new_id()}", content=body, headers={"Content-Type": "application/json"})
    assert error_of(resp) == (400, "invalid_json")


def test_a_byte_order_mark_is_allowed(client: Client) -> None:
    resp = client.http.post(f"/v1/sandboxes/{new_id()}", content=b'\xef\xbb\xbf{"persistent":false}',
                            headers={"Content-Type": "application/json"})
    assert resp.status_code == 200


def _raw_request(server: BridgeServer, head: str, body: bytes = b"") -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        data = b""
        while b"\r\n\r\n" not in data:
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
        return data


def test_declared_body_over_1_mib_is_413_unread(server: BridgeServer) -> None:
    head = (f"POST /v1/sandboxes/abc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {MAX_BODY_BYTES + 1}\r\n\r\n")
    answer = _raw_request(server, head)  # no body is ever sent
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_actual_body_over_1_mib_without_length_is_413(client: Client) -> None:
    data = b'{"persistent":true}' + b" " * (MAX_BODY_BYTES + 1 - 19)
    assert len(data) == MAX_BODY_BYTES + 1

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(data), 65536):
            yield data[i:i + 65536]

    resp = client.http.post(f"/v1/sandboxes/{new_id()}", content=chunks(), headers={"Content-Type": "application/json"})
    assert error_of(resp) == (413, "payload_too_large")


def test_body_of_exactly_1_mib_is_accepted(client: Client) -> None:
    data = b'{"persistent":true}' + b" " * (MAX_BODY_BYTES - 19)
    resp = client.http.post(f"/v1/sandboxes/{new_id()}", content=data, headers={"Content-Type": "application/json"})
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize("path,body", [
    ("", {"persistent": True, "size": "big"}),
    ("/exec", {"request_id": "a" * 32, "command": "true", "env": {"TOKEN": "x"}}),
    ("/read", {"path": "/etc/hostname", "offset": 1}),
])
def test_unknown_fields_are_refused(client: Client, path: str, body: dict[str, Any]) -> None:
    resp = client.post(f"/v1/sandboxes/{new_id()}{path}", body)
    assert error_of(resp) == (400, "unknown_field")


def test_release_and_cancel_ignore_extra_fields(client: Client, sid: str) -> None:
    assert client.post(f"/v1/sandboxes/{sid}/cancel/{rid()}", {"why": 1}).json() == {"ok": True}
    assert client.post(f"/v1/sandboxes/{sid}/release", {"why": 1}).json() == {"ok": True}


@pytest.mark.parametrize("config", [
    {"persistent": "true"}, {"persistent": None}, {}, {"persistent": 1},
    {"persistent": True, "cwd": "relative"}, {"persistent": True, "cwd": ""}, {"persistent": True, "cwd": "/a\u0000b"},
    {"persistent": True, "cwd": "/" + "a" * 4096}, {"persistent": True, "image": "bad name"},
    {"persistent": True, "image": "a" * 129}, {"persistent": True, "image": ""}, {"persistent": True, "instance": 3},
    {"persistent": True, "instance": "x" * 33},
])
def test_init_field_validation(client: Client, config: dict[str, Any]) -> None:
    assert error_of(client.post(f"/v1/sandboxes/{new_id()}", config)) == (400, "invalid_field")


@pytest.mark.parametrize("change", [
    {"request_id": "A" * 32}, {"request_id": "a" * 31}, {"request_id": "a" * 33}, {"request_id": None},
    {"request_id": "../../" + "a" * 26}, {"command": None}, {"command": 5}, {"command": "echo \u0000"},
    {"login": "true"}, {"login": 1}, {"stdin": 5}, {"stdin": "a\u0000"},
])
def test_exec_field_validation(client: Client, sid: str, change: dict[str, Any]) -> None:
    body = {"request_id": rid(), "command": "true", **change}
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", body)) == (400, "invalid_field")


@pytest.mark.parametrize("timeout", [0, 0.099, 900.001, -1, "10", True, 1e400, [1]])
def test_exec_timeout_out_of_range_is_invalid_timeout(client: Client, sid: str, timeout: Any) -> None:
    body = json.dumps({"request_id": rid(), "command": "true", "timeout": timeout}).replace("Infinity", "1e400")
    resp = client.http.post(f"/v1/sandboxes/{sid}/exec", content=body, headers={"Content-Type": "application/json"})
    assert error_of(resp) == (400, "invalid_timeout")


@pytest.mark.parametrize("timeout", [0.1, 900, None, 1])
def test_exec_timeout_at_the_bounds_is_accepted(client: Client, sid: str, timeout: Any) -> None:
    run = client.exec(sid, "true", timeout=timeout)
    assert run.status == 200 and run.exit_code in (0, 124)  # a loaded machine may need over 0.1 s


# ---------------------------------------------------------------------------- init, images, instances
def test_init_is_idempotent_and_does_not_boot(client: Client, server: BridgeServer) -> None:
    sandbox = new_id()
    first = client.init(sandbox, persistent=True)
    again = client.init(sandbox, persistent=True, cwd="/workspace", image="hermes", instance="standard-1")
    assert first.json() == again.json() == {"ok": True, "running": False}
    assert first.headers["cache-control"] == "no-store"
    assert server.world.get(sandbox) is None, "init started a container"
    status = client.status(sandbox).json()
    assert status == {"config": {"persistent": True, "cwd": "/workspace", "image": "hermes", "instance": "standard-1"},
                      "running": False, "busy": False, "snapshot_saved_at": None}


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


@pytest.mark.parametrize("instance,ok", [("lite", True), ("standard-1", True), ("standard-2", False),
                                         ("standard-4", False), ("basic", False), ("huge", False)])
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
    assert error_of(client.post(f"/v1/sandboxes/{sandbox}/exec", {"request_id": rid(), "command": "true"})) \
        == (404, "workspace_missing")
    assert error_of(client.post(f"/v1/sandboxes/{sandbox}/checkpoint")) == (404, "workspace_missing")
    assert error_of(client.post(f"/v1/sandboxes/{sandbox}/read", {"path": "/x"})) == (404, "workspace_missing")


# ---------------------------------------------------------------------------- the exec stream
def test_exec_stream_shape(client: Client, sid: str) -> None:
    request_id = rid()
    run = client.exec(sid, "printf hello", rid=request_id)
    assert run.status == 200
    assert run.headers["content-type"] == "application/x-ndjson"
    assert run.headers["cache-control"] == "no-store"
    assert run.headers["x-content-type-options"] == "nosniff"
    assert run.raw.endswith(b"\n") and all(line for line in run.raw.split(b"\n")[:-1])
    body = [e for e in run.events if e["type"] != "heartbeat"]
    assert body == [{"type": "started", "request_id": request_id}, {"type": "output", "data": "hello"},
                    {"type": "exit", "exit_code": 0}]


def test_heartbeats_for_the_whole_stream_and_none_after_the_end(client: Client, sid: str) -> None:
    run = client.exec(sid, "sleep 0.7; echo done")
    assert run.types.count("heartbeat") >= 2, run.types
    assert run.types[-1] == "exit" and run.output == "done\n"


def test_heartbeats_cover_a_cold_start() -> None:
    srv = make_server(startup_delay_s=0.9, heartbeat_s=0.25)
    try:
        cli = Client(srv)
        sandbox = new_id()
        cli.init(sandbox)
        run = cli.exec(sandbox, "true")
        assert run.types.index("started") >= 3, run.types
        assert run.exit_code == 0
        # warm: no boot wait any more
        assert cli.exec(sandbox, "true").types.index("started") == 0
        cli.close()
    finally:
        srv.stop()


def test_stdout_and_stderr_are_merged_in_order(client: Client, sid: str) -> None:
    run = client.exec(sid, "echo out; echo err >&2; echo out2; ls /no/such 2>&1 >/dev/null | wc -l")
    assert run.output == "out\nerr\nout2\n1\n"


def test_output_is_utf8_decoded_with_replacement(client: Client, sid: str) -> None:
    run = client.exec(sid, r"printf 'a\xffb\xe3\x81'; sleep 0.1; printf '\x82 \xf0\x9f\x98\x80 \xe3\x81'")
    assert run.output == "a\ufffdb\u3042 \U0001F600 \ufffd"
    assert client.exec(sid, "echo 日本語 🎉; exit 7").output == "日本語 🎉\n"


def test_output_frames_are_at_most_4096_utf16_units_and_never_split_a_pair(client: Client, sid: str) -> None:
    run = client.exec(sid, "printf 'a'; for i in $(seq 3000); do printf '\\xf0\\x9f\\x98\\x80'; done; "
                           "head -c 9000 /dev/zero | tr '\\0' b")
    pieces = [e["data"] for e in run.events if e["type"] == "output"]
    assert "".join(pieces) == "a" + "\U0001F600" * 3000 + "b" * 9000
    for piece in pieces:
        assert len(piece.encode("utf-16-le")) // 2 <= 4096
        piece.encode("utf-8")  # a split pair would leave a lone surrogate here
    assert len(pieces) >= 4


@pytest.mark.parametrize("command,code", [("exit 7", 7), ("false", 1), ("kill -9 $$", 137), ("nosuchcmd", 127)])
def test_exit_codes_pass_through(client: Client, sid: str, command: str, code: int) -> None:
    assert client.exec(sid, command).exit_code == code


def test_commands_run_in_the_configured_cwd_with_the_container_home(client: Client, server: BridgeServer) -> None:
    sandbox = new_id()
    client.init(sandbox, cwd="/workspace/deep/er")
    run = client.exec(sandbox, "pwd; echo $HOME; whoami 2>/dev/null || id -un")
    lines = run.output.splitlines()
    if server.world.namespaced:
        assert lines[:2] == ["/workspace/deep/er", "/home/hermes"]
    box = server.world.get(sandbox)
    assert box is not None and (box.workspace_dir / "deep" / "er").is_dir()


def test_a_cwd_that_cannot_be_made_is_invalid_cwd(client: Client) -> None:
    sandbox = new_id()
    client.init(sandbox, cwd="/etc/passwd/sub")
    run = client.exec(sandbox, "true")
    assert run.types == ["error"] and run.error_code == "invalid_cwd"


def test_login_selects_a_login_shell(client: Client, sid: str) -> None:
    probe = "shopt -q login_shell && echo login || echo plain"
    assert client.exec(sid, probe).output == "plain\n"
    assert client.exec(sid, probe, login=True).output == "login\n"
    assert client.exec(sid, probe, login=False).output == "plain\n"


def test_stdin_is_written_once_then_closed(client: Client, sid: str) -> None:
    run = client.exec(sid, "cat; echo; cat; echo rc=$?", stdin="abc é\n", timeout=5)
    assert run.output == "abc é\n\nrc=0\n"
    # absent or null stdin: the command sees end of input at once
    assert client.exec(sid, "cat; echo end", timeout=5).output == "end\n"
    assert client.exec(sid, "cat; echo end", stdin=None, timeout=5).output == "end\n"
    assert client.exec(sid, "wc -c", stdin="", timeout=5).output.strip() == "0"


def test_stdin_need_not_be_read(client: Client, sid: str) -> None:
    run = client.exec(sid, "echo ignored", stdin="x" * 300_000)
    assert run.exit_code == 0 and run.output == "ignored\n"


# ---------------------------------------------------------------------------- limits
def test_command_limit_is_64_kib_of_utf8(client: Client, sid: str) -> None:
    at = ": " + "x" * (MAX_COMMAND_BYTES - 2)
    assert client.exec(sid, at).exit_code == 0
    over = at + "x"
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": over})) \
        == (400, "invalid_field")
    multibyte = ": " + "é" * ((MAX_COMMAND_BYTES - 2) // 2)  # 65,536 bytes, 32,769 characters
    assert client.exec(sid, multibyte).exit_code == 0
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": multibyte + "é"})) \
        == (400, "invalid_field")


def test_empty_command_is_allowed(client: Client, sid: str) -> None:
    assert client.exec(sid, "").exit_code == 0


def test_stdin_limit_is_768_kib_of_utf8(client: Client, sid: str) -> None:
    assert client.exec(sid, "wc -c", stdin="s" * MAX_STDIN_BYTES, timeout=10).output.strip() == str(MAX_STDIN_BYTES)
    assert client.exec(sid, "wc -c", stdin="é" * (MAX_STDIN_BYTES // 2), timeout=10).output.strip() == str(MAX_STDIN_BYTES)
    for over in ("s" * (MAX_STDIN_BYTES + 1), "é" * (MAX_STDIN_BYTES // 2) + "s"):
        resp = client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": "wc -c", "stdin": over})
        assert error_of(resp) == (400, "invalid_field")


def test_an_exec_body_over_1_mib_is_413_even_with_stdin_in_bounds(client: Client, sid: str) -> None:
    # 700,000 control characters are within the stdin limit but JSON-escape to 4.2 MB.
    resp = client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": "true", "stdin": "\x01" * 700_000})
    assert error_of(resp) == (413, "payload_too_large")


def test_output_at_the_limit_is_delivered_whole(client: Client, sid: str) -> None:
    run = client.exec(sid, f"head -c {MAX_OUTPUT_UNITS} /dev/zero | tr '\\0' a")
    assert run.exit_code == 0
    assert len(run.output) == MAX_OUTPUT_UNITS and set(run.output) == {"a"}


def test_output_over_the_limit_is_an_error_never_a_truncated_success(client: Client, sid: str) -> None:
    run = client.exec(sid, f"head -c {MAX_OUTPUT_UNITS + 1} /dev/zero | tr '\\0' a; echo never")
    assert run.types[-1] == "error" and run.error_code == "output_limit"
    assert "exit" not in run.types
    assert len(run.output) <= MAX_OUTPUT_UNITS
    # the workspace is free again and the flood's process group was stopped
    assert client.exec(sid, "echo next").output == "next\n"


def test_output_limit_counts_utf16_units(client: Client, sid: str) -> None:
    lines = (MAX_OUTPUT_UNITS - 2) // 3  # "😀\n" is 3 UTF-16 units in 2 code points
    at = client.exec(sid, f"yes '😀' | head -n {lines}; printf ab")
    assert at.exit_code == 0
    assert len(at.output) == lines * 2 + 2  # far fewer than 2,000,000 code points...
    over = client.exec(sid, f"yes '😀' | head -n {lines}; printf abc")
    assert over.error_code == "output_limit"  # ... yet one unit more is over the limit


# ---------------------------------------------------------------------------- supervisor
def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2:].split()[0] != b"Z"


def _pgid(output: str) -> int:
    return int(output.split()[0])


def test_timeout_terms_the_group_and_exits_124(client: Client, sid: str) -> None:
    started = time.monotonic()
    run = client.exec(sid, "echo $$; sleep 30 & sleep 30", timeout=0.3)
    elapsed = time.monotonic() - started
    assert run.exit_code == 124
    assert elapsed < 0.3 + FAST.kill_grace_s + 0.5, elapsed
    assert not group_alive(_pgid(run.output)), "the background job outlived the timeout"


def test_timeout_kills_a_group_that_ignores_sigterm(client: Client, sid: str) -> None:
    started = time.monotonic()
    run = client.exec(sid, "trap '' TERM; echo $$; sleep 30", timeout=0.3)
    elapsed = time.monotonic() - started
    assert run.exit_code == 124
    assert elapsed >= 0.3 + FAST.kill_grace_s * 0.9, "SIGKILL came before the grace"
    assert elapsed < 0.3 + FAST.kill_grace_s + 0.6, elapsed
    assert not group_alive(_pgid(run.output))


def test_worker_timings_are_the_defaults() -> None:
    s = Settings()
    assert (s.kill_grace_s, s.drain_idle_s, s.drain_grace_s, s.hard_deadline_grace_s, s.heartbeat_s, s.idle_s) \
        == (2.0, 0.3, 5.0, 15.0, 10.0, 600.0)


def _exec_in_background(client: Client, sid: str, command: str, **fields: Any
                        ) -> tuple[concurrent.futures.Future[Run], threading.Event, str]:
    started = threading.Event()
    request_id = rid()

    def seen(event: dict[str, Any]) -> None:
        if event["type"] == "output":
            started.set()

    other = Client(client.server)
    future = in_background(lambda: other.exec(sid, command, rid=request_id, on_event=seen, **fields))
    assert started.wait(10), "the command never produced output"
    return future, started, request_id


def test_cancel_during_exec_exits_143_and_is_idempotent(client: Client, sid: str) -> None:
    future, _, request_id = _exec_in_background(client, sid, "echo $$; sleep 30")
    assert client.cancel(sid, request_id).json() == {"ok": True}
    run = future.result(10)
    assert run.exit_code == 143
    assert not group_alive(_pgid(run.output))
    assert client.cancel(sid, request_id).json() == {"ok": True}
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": request_id, "command": "true"})) \
        == (409, "duplicate_request")


def test_cancel_escalates_to_sigkill(client: Client, sid: str) -> None:
    future, _, request_id = _exec_in_background(client, sid, "trap '' TERM; echo $$; sleep 30")
    client.cancel(sid, request_id)
    run = future.result(10)
    assert run.exit_code == 143 and not group_alive(_pgid(run.output))


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
    future, _, _ = _exec_in_background(client, sid, "echo go; sleep 0.4; echo done")
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


def test_client_disconnect_cancels_the_command(client: Client, sid: str) -> None:
    seen = threading.Event()
    with client.http.stream("POST", f"/v1/sandboxes/{sid}/exec",
                            json={"request_id": rid(), "command": "echo $$; sleep 30"}) as resp:
        for line in resp.iter_lines():
            if json.loads(line)["type"] == "output":
                pgid = _pgid(json.loads(line)["data"])
                seen.set()
                break
    assert seen.is_set()
    wait_for(lambda: not group_alive(pgid), what="the command to be stopped")
    wait_for(lambda: client.status(sid).json()["busy"] is False, what="the workspace to be free")


def test_hard_deadline_stops_a_wedged_command_and_keeps_the_workspace(client: Client, sid: str,
                                                                       server: BridgeServer) -> None:
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
    assert not group_alive(_pgid(run.output))
    assert client.exec(sid, "cat kept").output == "keep\n"


def test_background_job_output_is_drained_briefly_and_the_job_survives(client: Client, sid: str) -> None:
    run = client.exec(sid, "(sleep 0.05; echo late) & echo $! > bg; echo now")
    assert run.exit_code == 0 and run.output == "now\nlate\n"
    started = time.monotonic()
    noisy = client.exec(sid, "(while :; do echo tick; sleep 0.02; done) & echo $! > noisy; echo fg")
    elapsed = time.monotonic() - started
    assert noisy.exit_code == 0 and "fg" in noisy.output.splitlines() and "tick" in noisy.output
    assert FAST.drain_grace_s * 0.9 <= elapsed < FAST.drain_grace_s + 0.8, elapsed
    pid = int(client.exec(sid, "cat noisy").output)
    assert client.exec(sid, f"kill -0 {pid} && echo alive").output == "alive\n"
    client.exec(sid, f"kill {pid}")


def test_one_foreground_operation_per_workspace(client: Client, sid: str) -> None:
    future, _, request_id = _exec_in_background(client, sid, "echo go; sleep 30")
    try:
        assert client.status(sid).json()["busy"] is True
        second = client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": rid(), "command": "true"})
        assert error_of(second) == (409, "workspace_busy")
        assert error_of(client.init(sid)) == (409, "workspace_busy")
        assert error_of(client.post(f"/v1/sandboxes/{sid}/release")) == (409, "workspace_busy")
        assert error_of(client.post(f"/v1/sandboxes/{sid}/checkpoint")) == (409, "workspace_busy")
        assert error_of(client.post(f"/v1/sandboxes/{sid}/read", {"path": "/etc/hostname"})) == (409, "workspace_busy")
        assert error_of(client.http.request("DELETE", f"/v1/sandboxes/{sid}", json={"confirm": True})) \
            == (409, "workspace_busy")
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
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": first, "command": "true"})) \
        == (409, "duplicate_request")
    for _ in range(63):
        client.exec(sid, "true")
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec",
                                {"request_id": first, "command": "echo 1 >> count"})) \
        == (409, "duplicate_request")
    client.exec(sid, "true")  # the 64th newer id pushes the first one out
    assert client.exec(sid, "echo 1 >> count", rid=first).exit_code == 0
    assert client.exec(sid, "wc -l < count").output.strip() == "2"


def test_cancelled_ids_are_remembered_over_the_last_64(client: Client, sid: str) -> None:
    ids = [rid() for _ in range(65)]
    for request_id in ids:
        client.cancel(sid, request_id)
    assert error_of(client.post(f"/v1/sandboxes/{sid}/exec", {"request_id": ids[1], "command": "true"})) \
        == (409, "command_cancelled")
    assert client.exec(sid, "true", rid=ids[0]).exit_code == 0


# ---------------------------------------------------------------------------- persistence
def test_idle_workspaces_are_snapshotted_and_restored() -> None:
    srv = make_server(idle_s=0.4)
    try:
        cli = Client(srv)
        world = CloudflareWorld(srv.bridge)
        keep, gone = new_id("keep"), new_id("eph")
        cli.init(keep, persistent=True)
        cli.init(gone, persistent=False)
        pid = int(cli.exec(keep, "echo kept > f; echo home > ~/h; sleep 30 >/dev/null 2>&1 & echo $!").output)
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


def test_release_of_a_persistent_workspace_snapshots_stops_and_restores(client: Client, sid: str,
                                                                         world: CloudflareWorld) -> None:
    pid = client.exec(sid, "echo data > f; sleep 30 >/dev/null 2>&1 & echo $!").output.strip()
    assert client.post(f"/v1/sandboxes/{sid}/release").json() == {"ok": True}
    status = client.status(sid).json()
    assert status["running"] is False and status["snapshot_saved_at"] is not None
    assert world.sandboxes()[sid] == "paused"
    wait_for(lambda: not alive(int(pid)), timeout=2, what="release to stop the background job")
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


def test_a_container_lost_mid_command_ends_the_stream_at_once(client: Client, sid: str,
                                                              world: CloudflareWorld) -> None:
    future, _, _ = _exec_in_background(client, sid, "echo go; sleep 30", timeout=60)
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


# ---------------------------------------------------------------------------- /read
def test_read_returns_raw_bytes(client: Client, sid: str) -> None:
    cwd = client.exec(sid, r"printf 'a\xff\x00b' > bin; mkdir -p dir; pwd").output.strip()
    resp = client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/bin"})
    assert resp.status_code == 200 and resp.content == b"a\xff\x00b"
    assert resp.headers["content-type"] == "application/octet-stream"
    assert resp.headers["x-file-size"] == "4" and resp.headers["cache-control"] == "no-store"
    assert error_of(client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/nope"})) == (404, "file_not_found")
    assert error_of(client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/dir"})) == (400, "not_a_file")
    assert error_of(client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/bin", "max_bytes": 3})) \
        == (413, "file_too_large")
    assert client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/bin", "max_bytes": 4}).content == b"a\xff\x00b"
    for bad in ({"path": "workspace/bin"}, {"path": "/x", "max_bytes": -1}, {"path": "/x", "max_bytes": 1.5},
                {"path": "/x", "max_bytes": 2 ** 30 + 1}):
        assert error_of(client.post(f"/v1/sandboxes/{sid}/read", bad)) == (400, "invalid_field")
    assert client.status(sid).json()["busy"] is False


def test_read_restores_a_stopped_workspace(client: Client, sid: str) -> None:
    cwd = client.exec(sid, "echo snap > s; pwd").output.strip()
    client.post(f"/v1/sandboxes/{sid}/release")
    assert client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/s"}).content == b"snap\n"


# ---------------------------------------------------------------------------- faults
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


def test_fault_with_no_route_matches_every_route_including_unknown_paths(client: Client,
                                                                          server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="status", status=502, times=3))
    assert client.http.get("/health").status_code == 502
    assert client.http.get("/no/such/path").status_code == 502
    assert client.status(new_id()).status_code == 502
    assert [entry[0] for entry in server.faults.log[-3:]] == ["GET /health", "GET /no/such/path", ROUTE_STATUS]


def test_fault_drop_cuts_the_exec_stream(client: Client, sid: str, server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="drop", route=ROUTE_EXEC, after_bytes=20))
    got = b""
    with pytest.raises(httpx.RemoteProtocolError), client.http.stream(
            "POST", f"/v1/sandboxes/{sid}/exec", json={"request_id": rid(), "command": "echo $$; sleep 30"}) as resp:
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


def test_fault_half_close_stops_sending_but_keeps_the_connection(client: Client, sid: str,
                                                                  server: BridgeServer) -> None:
    server.faults.arm(Fault(kind="half-close", route=ROUTE_EXEC, after_bytes=0))
    slow = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {server.token}"},
                        timeout=httpx.Timeout(10, read=0.8))
    with pytest.raises(httpx.ReadTimeout), slow.stream(
            "POST", f"/v1/sandboxes/{sid}/exec", json={"request_id": rid(), "command": "echo ran > h"}) as resp:
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


def test_fault_garbage_inserts_a_malformed_line_then_carries_on(client: Client, sid: str,
                                                                server: BridgeServer) -> None:
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
    with pytest.raises(httpx.RemoteProtocolError), client.http.stream(
            "POST", f"/v1/sandboxes/{sid}/exec", json={"request_id": request_id, "command": "echo hi"}) as resp:
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
