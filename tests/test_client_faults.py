"""The client-side fault injector (conformance/client_faults.py) against a real loopback HTTP server.

The server speaks a small sandbox API: create, a command whose output streams
as NDJSON lines, a state read, a catalog that is no role; it counts every
request it gets.  Each fault kind is armed by role through the injector's
FaultScript interface and met by a plain httpx client, sync and async.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from conformance import fault_routes
from conformance.client_faults import ClientFaults, FaultWorld, InjectorError, table_for_run
from conformance.damage import lines
from conformance.fault_routes import RouteTableError
from conformance.verdicts import UNVERIFIED_PREFIX

LINE_COUNT = 60
ROUTES = """
vendor: loopback
routes:
  create: ["POST /v1/boxes"]
  exec: ["POST /v1/boxes/{id}/exec"]
  read: ["GET /v1/boxes/{id}", "GET /v1/boxes"]
  ignore: ["GET /v1/boxes/catalog"]
"""


def output_lines() -> list[bytes]:
    out = [json.dumps({"stdout": f"line {n:03d} " + "x" * 60}).encode() + b"\n" for n in range(LINE_COUNT)]
    return [*out, b'{"returncode": 7}\n']


BODY = b"".join(output_lines())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _json(self, status: int, data: object) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.hits[f"POST {self.path}"] += 1  # type: ignore[attr-defined]
        if self.path == "/v1/boxes":
            self._json(201, {"id": "b1"})
            return
        if self.path.endswith("/exec"):
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in output_lines():  # one chunk per line, as a streaming service sends them
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        self._json(404, {"error": "no such route"})

    def do_GET(self) -> None:
        self.server.hits[f"GET {self.path}"] += 1  # type: ignore[attr-defined]
        if self.path == "/v1/boxes/catalog":
            self._json(200, {"sizes": ["small"]})
        elif self.path.startswith("/v1/boxes/"):
            self._json(200, {"id": self.path.rsplit("/", 1)[1], "state": "running"})
        else:
            self._json(200, {"boxes": []})


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A connection the fault proxy cut is what the test made: nothing to print."""


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = _QuietServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.hits = Counter()  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def base(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def table(tmp_path: Path) -> fault_routes.RouteTable:
    path = tmp_path / "routes.yaml"
    path.write_text(ROUTES)
    return fault_routes.load(path)


@pytest.fixture
def injector(table: fault_routes.RouteTable, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClientFaults]:
    faults = ClientFaults(table)
    faults.start(monkeypatch.setenv)
    yield faults
    faults.stop()


def _exec(client: httpx.Client, base: str, box: str = "b1", **kwargs: object) -> httpx.Response:
    return client.post(f"{base}/v1/boxes/{box}/exec", json={"command": ["true"]}, **kwargs)  # type: ignore[arg-type]


def _warm(client: httpx.Client, base: str) -> None:
    """One command call first: the injector refuses exec faults before it has seen one."""
    assert _exec(client, base).content == BODY


def _stream_until_error(client: httpx.Client, base: str, **kwargs: object) -> tuple[bytes, BaseException | None]:
    got = b""
    with client.stream("POST", f"{base}/v1/boxes/b1/exec", json={"command": ["x"]}, **kwargs) as response:  # type: ignore[arg-type]
        try:
            for chunk in response.iter_raw():
                got += chunk
        except httpx.HTTPError as exc:
            return got, exc
    return got, None


# ------------------------------------------------------------------ pass-through and roles
def test_requests_meeting_no_fault_reach_the_server_unchanged(injector, server, base):
    with httpx.Client() as client:
        assert client.post(f"{base}/v1/boxes", json={}).json() == {"id": "b1"}
        assert _exec(client, base).content == BODY
        assert client.get(f"{base}/v1/boxes/b1").json()["state"] == "running"
        assert client.get(f"{base}/v1/boxes/catalog").json() == {"sizes": ["small"]}
        assert client.get(f"{base}/elsewhere").status_code == 200
    assert server.hits == Counter(
        {
            "POST /v1/boxes": 1,
            "POST /v1/boxes/b1/exec": 1,
            "GET /v1/boxes/b1": 1,
            "GET /v1/boxes/catalog": 1,
            "GET /elsewhere": 1,
        }
    )
    assert {role: sum(c.values()) for role, c in injector.seen.items()} == {"create": 1, "exec": 1, "read": 1}


def test_the_most_specific_route_wins_so_an_ignored_route_meets_no_fault(injector, server, base):
    armed = injector.arm("status", "read", times=-1, status=503)
    with httpx.Client() as client:
        assert client.get(f"{base}/v1/boxes/catalog").status_code == 200
        assert client.get(f"{base}/v1/boxes/b1").status_code == 503
    assert armed.fired == 1 and server.hits["GET /v1/boxes/catalog"] == 1 and server.hits["GET /v1/boxes/b1"] == 0


# ------------------------------------------------------------------ status
def test_status_answers_in_the_servers_place_then_lets_requests_through(injector, server, base):
    since = time.monotonic()
    armed = injector.arm("status", "create", times=2, status=429, message="Too many requests")
    with httpx.Client() as client:
        answers = [client.post(f"{base}/v1/boxes", json={}) for _ in range(3)]
    assert [a.status_code for a in answers] == [429, 429, 201]
    assert answers[0].json() == {"error": "Too many requests"}
    assert armed.fired == 2 and server.hits["POST /v1/boxes"] == 1
    assert len(injector.attempts("create", since=since)) == 2 and injector.attempts("exec", since=since) == []


def test_a_fault_for_one_sandbox_spares_the_others(injector, server, base):
    with httpx.Client() as client:
        _warm(client, base)
        armed = injector.arm("status", "exec", sandbox="b2", status=500)
        assert _exec(client, base, "b1").status_code == 200
        assert _exec(client, base, "b2").status_code == 500
    assert armed.fired == 1 and server.hits["POST /v1/boxes/b2/exec"] == 0


def test_clear_disarms_what_was_armed(injector, server, base):
    armed = injector.arm("status", "read", times=-1, status=503)
    with httpx.Client() as client:
        assert client.get(f"{base}/v1/boxes/b1").status_code == 503
        injector.clear()
        assert client.get(f"{base}/v1/boxes/b1").status_code == 200
    assert armed.fired == 1


# ------------------------------------------------------------------ latency, silence
def test_latency_delays_the_request_which_then_reaches_the_server(injector, server, base):
    with httpx.Client() as client:
        armed = injector.arm("latency", "read", delay_s=0.2)
        assert client.get(f"{base}/v1/boxes/b1").json()["state"] == "running"
    assert armed.fired == 1 and server.hits["GET /v1/boxes/b1"] == 1


def test_latency_past_the_read_timeout_times_the_client_out_before_the_server_sees_it(injector, server, base):
    with httpx.Client() as client:
        injector.arm("latency", "read", delay_s=60)
        with pytest.raises(httpx.ReadTimeout):
            client.get(f"{base}/v1/boxes/b1", timeout=httpx.Timeout(5.0, read=0.3))
    assert server.hits["GET /v1/boxes/b1"] == 0


def test_silence_ends_at_the_clients_read_timeout_and_runs_nothing(injector, server, base):
    with httpx.Client() as client:
        _warm(client, base)
        armed = injector.arm("silence", "exec")
        with pytest.raises(httpx.ReadTimeout):
            _exec(client, base, timeout=httpx.Timeout(5.0, read=0.3))
    assert armed.fired == 1 and server.hits["POST /v1/boxes/b1/exec"] == 1  # the warm-up only


def test_stopping_the_injector_releases_a_request_held_without_a_timeout(table, monkeypatch, server, base):
    faults = ClientFaults(table)
    faults.start(monkeypatch.setenv)
    outcome: list[BaseException] = []
    try:
        with httpx.Client(timeout=None) as client:
            _warm(client, base)
            armed = faults.arm("silence", "exec")

            def call() -> None:
                try:
                    _exec(client, base)
                except BaseException as exc:
                    outcome.append(exc)

            caller = threading.Thread(target=call, daemon=True)
            caller.start()
            while not armed.fired:
                time.sleep(0.01)
            assert caller.is_alive(), "a silenced request without a read timeout returned on its own"
    finally:
        faults.stop()
    caller.join(10)
    assert not caller.is_alive() and isinstance(outcome[0], httpx.ReadError)


# ------------------------------------------------------------------ damaged replies
def test_drop_passes_the_given_bytes_then_cuts_the_connection(injector, server, base):
    with httpx.Client() as client:
        _warm(client, base)
        armed = injector.arm("drop", "exec", after_bytes=1000)
        got, error = _stream_until_error(client, base)
    assert armed.fired == 1 and server.hits["POST /v1/boxes/b1/exec"] == 2  # the command reached the server
    assert isinstance(error, httpx.RemoteProtocolError) and got == BODY[:1000]


def test_half_close_stops_the_reply_and_keeps_the_connection_until_the_read_timeout(injector, server, base):
    with httpx.Client() as client:
        _warm(client, base)
        injector.arm("half-close", "exec", after_bytes=500)
        got, error = _stream_until_error(client, base, timeout=httpx.Timeout(5.0, read=0.3))
    assert isinstance(error, httpx.ReadTimeout) and got == BODY[:500]


def test_closing_a_half_closed_reply_releases_its_reader(injector, server, base):
    received: list[bytes] = []
    ended: list[BaseException] = []
    with httpx.Client(timeout=None) as client:
        _warm(client, base)
        injector.arm("half-close", "exec", after_bytes=500)
        with client.stream("POST", f"{base}/v1/boxes/b1/exec", json={}) as response:

            def read() -> None:
                try:
                    for chunk in response.iter_raw():
                        received.append(chunk)
                except BaseException as exc:
                    ended.append(exc)

            reader = threading.Thread(target=read, daemon=True)
            reader.start()
            while sum(map(len, received)) < 500:
                time.sleep(0.01)
            assert reader.is_alive(), "the reader of a half-closed reply ended by itself"
            response.close()
            reader.join(10)
    assert not reader.is_alive() and ended and b"".join(received) == BODY[:500]


def test_garbage_is_a_line_of_its_own_at_the_first_line_start_past_the_bytes(injector, server, base):
    with httpx.Client() as client:
        _warm(client, base)
        injector.arm("garbage", "exec", after_bytes=250, payload="}{ not json")
        got = _exec(client, base).content
    original = output_lines()
    before = next(i for i in range(len(original)) if sum(map(len, original[:i])) >= 250)
    assert list(lines([got])) == [*original[:before], b"}{ not json\n", *original[before:]]


def test_truncate_sends_half_of_the_line_past_the_bytes_then_cuts(injector, server, base):
    with httpx.Client() as client:
        _warm(client, base)
        injector.arm("truncate", "exec", after_bytes=250)
        got, error = _stream_until_error(client, base)
    original = output_lines()
    before = next(i for i in range(len(original)) if sum(map(len, original[:i])) >= 250)
    head = b"".join(original[:before])
    assert isinstance(error, httpx.RemoteProtocolError)
    assert got == head + original[before][: len(original[before]) // 2]


def test_an_async_client_meets_the_same_faults(injector, server, base):
    async def scenario() -> tuple[int, bytes, BaseException | None]:
        async with httpx.AsyncClient() as client:
            assert (await client.post(f"{base}/v1/boxes/b1/exec", json={})).content == BODY
            injector.arm("status", "create", status=429)
            refused = (await client.post(f"{base}/v1/boxes", json={})).status_code
            injector.arm("drop", "exec", after_bytes=700)
            got = b""
            async with client.stream("POST", f"{base}/v1/boxes/b1/exec", json={}) as response:
                try:
                    async for chunk in response.aiter_raw():
                        got += chunk
                except httpx.HTTPError as exc:
                    return refused, got, exc
            return refused, got, None

    refused, got, error = asyncio.run(scenario())
    assert refused == 429 and isinstance(error, httpx.RemoteProtocolError) and got == BODY[:700]
    assert server.hits["POST /v1/boxes"] == 0


# ------------------------------------------------------------------ what the injector refuses
def test_flood_is_refused_naming_why(injector):
    with pytest.raises(ValueError, match="flood"):
        injector.arm("flood", "exec")


def test_an_exec_fault_before_any_command_call_was_seen_is_unverified(injector):
    with pytest.raises(pytest.skip.Exception) as caught:
        injector.arm("drop", "exec")
    assert str(caught.value.msg).startswith(UNVERIFIED_PREFIX) and "POST /v1/boxes/{id}/exec" in caught.value.msg


def test_one_injector_per_process(injector, table, monkeypatch):
    with pytest.raises(InjectorError, match="already active"):
        ClientFaults(table).start(monkeypatch.setenv)


# ------------------------------------------------------------------ route tables
def test_the_kits_tables_name_the_routes_its_fakes_fault():
    from fakes.cloudflare.world_adapter import FAULT_ROUTES as CLOUDFLARE
    from fakes.deepinfra.world_adapter import FAULT_ROUTES as DEEPINFRA
    from fakes.upstash.settings import WS_ROUTE
    from fakes.upstash.world_adapter import FAULT_ROUTES as UPSTASH

    websocket = {"WS /v2/box/{id}/exec-session": WS_ROUTE}
    for name, fake in (("upstash", UPSTASH), ("deepinfra", DEEPINFRA), ("cloudflare", CLOUDFLARE)):
        kit = fault_routes.vendor(name).role_routes()
        assert {role: {websocket.get(r, r) for r in routes} for role, routes in kit.items()} == {
            role: set(routes) for role, routes in fake.items()
        }, name


@pytest.mark.parametrize(
    "routes, message",
    [
        ({"create": ["POST /a"], "exec": ["POST /a/{id}/x"]}, "no route for role"),
        ({"create": ["POST /a"], "exec": ["FETCH /x"], "read": ["GET /a"]}, "must be 'METHOD /path'"),
        ({"create": ["POST /a"], "exec": ["POST /a/x{id}"], "read": ["GET /a"]}, "a placeholder is a whole segment"),
        ({"create": ["POST /a/{id}"], "exec": ["POST /a/{box}"], "read": ["GET /a"]}, "match the same requests"),
        ({"create": ["POST /a"], "exec": ["POST /b"], "read": ["GET /a"], "pause": ["POST /c"]}, "unknown role"),
    ],
)
def test_a_wrong_route_table_is_an_error_naming_the_entry(routes, message):
    with pytest.raises(RouteTableError, match=message):
        fault_routes.build("test", routes, "test table")


def test_client_faults_setting_picks_the_table_or_says_what_is_missing(tmp_path):
    class World:
        capabilities = frozenset({"world", "transport-faults"})

    assert table_for_run(None, vendor="upstash", world=World()) is None  # the fake scripts faults itself
    assert table_for_run(None, vendor="upstash", world=None).name == "upstash"  # live: automatic
    assert table_for_run(None, vendor=None, world=None) is None  # an unknown vendor needs a table
    assert table_for_run("off", vendor="upstash", world=None) is None
    assert table_for_run("on", vendor="deepinfra", world=World()).name == "deepinfra"
    with pytest.raises(RouteTableError, match="name a vendor the kit knows"):
        table_for_run("on", vendor=None, world=None)
    with pytest.raises(RouteTableError, match="not a vendor the kit knows"):
        table_for_run("acme", vendor=None, world=None)
    routes = tmp_path / "acme.yaml"
    routes.write_text(ROUTES)
    assert table_for_run(str(routes), vendor=None, world=None).name == "loopback"


# ------------------------------------------------------------------ the run's view
def test_without_a_fake_the_world_view_has_faults_and_nothing_else(table):
    view = FaultWorld(None, ClientFaults(table))
    assert view.capabilities == {"transport-faults"} and isinstance(view.faults, ClientFaults)
    assert view.locate(".kit-x", "x") is None and view.sandboxes() == {}
    with pytest.raises(AttributeError, match="no world view"):
        view.pause("b1")


def test_with_a_fake_the_world_view_keeps_the_fakes_world_but_not_its_faults(table):
    class World:
        capabilities = frozenset({"world", "world-states", "transport-faults"})
        faults = "the fake's script"

        def sandboxes(self) -> dict[str, str]:
            return {"b1": "running"}

        def pause(self, sandbox: str) -> str:
            return f"paused {sandbox}"

    view = FaultWorld(World(), ClientFaults(table))
    assert view.capabilities == World.capabilities and isinstance(view.faults, ClientFaults)
    assert view.sandboxes() == {"b1": "running"} and view.pause("b1") == "paused b1"


@pytest.mark.parametrize("backend, proxied", [("upstash_box", True), ("deepinfra", False)])
def test_a_live_run_of_a_known_backend_injects_client_side(tmp_path, monkeypatch, backend, proxied):
    """No service is reached: starting a run loads the plugin and sets the harness up, nothing more."""
    from conformance.run import KitRun, RunOptions

    monkeypatch.delenv("CI", raising=False)
    for name in ("ws_proxy", "wss_proxy"):
        monkeypatch.delenv(name, raising=False)
    # A live run never invents the key (conformance.credentials): the user sets it, as for the real service.
    monkeypatch.setenv(
        {"upstash_box": "UPSTASH_BOX_API_KEY", "deepinfra": "DEEPINFRA_API_KEY"}[backend], "user-key-1234"
    )
    kit = KitRun.start(RunOptions(backend=backend, live=True, host="builtin"), tmp_path)
    try:
        assert kit.fake is None and isinstance(kit.world, FaultWorld) and kit.has("transport-faults")
        assert kit.context()["backend"]["transport_faults"] == f"client-side ({backend.split('_')[0]} routes)"
        proxy = kit.world.faults.proxy
        assert (proxy is not None) is proxied
        if proxied:
            # lower case on purpose: urllib (and so websockets) prefers it over WS_PROXY
            assert os.environ["ws_proxy"] == os.environ["wss_proxy"] == proxy.address  # noqa: SIM112
    finally:
        kit.close()
    assert "ws_proxy" not in os.environ and "wss_proxy" not in os.environ
