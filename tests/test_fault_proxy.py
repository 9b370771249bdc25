"""The fault proxy (conformance/fault_proxy.py) between a real WebSocket client and a real loopback server.

The server speaks a session protocol like Upstash's exec session: the client
sends one start message, the server answers ``started``, sends 40 output
frames, then ``exit``.  The client is the ``websockets`` package, pointed at
the proxy by ``ws_proxy`` / ``wss_proxy`` as a run points a backend's client,
and faults are armed by role through the client-side injector.  Over TLS the
server has a certificate made for the test.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.exceptions import ConnectionClosed, ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect
from websockets.sync.server import ServerConnection, serve

from conformance import fault_routes
from conformance.client_faults import ClientFaults
from conformance.verdicts import UNVERIFIED_PREFIX

OUTPUTS = 40
ROUTES = {"create": ["POST /v1/boxes"], "exec": ["WS /v1/boxes/{id}/session"], "read": ["GET /v1/boxes/{id}"]}


class Session:
    """A loopback WebSocket server; counts connections and the start messages it got."""

    def __init__(self, tls: ssl.SSLContext | None = None):
        self.connections = 0
        self.starts = 0
        self._server = serve(self._handle, "127.0.0.1", 0, ssl=tls, compression=None)
        self.port = self._server.socket.getsockname()[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def _handle(self, ws: ServerConnection) -> None:
        self.connections += 1
        try:
            json.loads(ws.recv(timeout=10))
        except (TimeoutError, ConnectionClosed):
            return
        self.starts += 1
        try:
            ws.send(json.dumps({"type": "started", "pid": 42}))
            for n in range(OUTPUTS):
                ws.send(json.dumps({"type": "stdout", "data": f"{n:02d}" + "o" * 98}))
            ws.send(json.dumps({"type": "exit", "code": 7}))
        except ConnectionClosed:
            pass

    def close(self) -> None:
        self._server.shutdown()


@pytest.fixture
def injector(monkeypatch: pytest.MonkeyPatch) -> Iterator[ClientFaults]:
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    faults = ClientFaults(fault_routes.build("loopback", dict(ROUTES), "test table"))
    faults.start(monkeypatch.setenv)
    yield faults
    faults.stop()


@pytest.fixture
def server() -> Iterator[Session]:
    session = Session()
    yield session
    session.close()


def converse(url: str, *, ssl_context: ssl.SSLContext | None = None, wait_s: float = 10.0) -> tuple[list[dict], str]:
    """Start a session; (the frames received, how it ended: exit, closed, timeout)."""
    frames: list[dict] = []
    with connect(url, open_timeout=wait_s, close_timeout=0.5, ssl=ssl_context, compression=None) as ws:
        ws.send(json.dumps({"type": "start", "cmd": "x"}))
        while True:
            try:
                raw = ws.recv(timeout=wait_s)
            except TimeoutError:
                return frames, "timeout"
            except ConnectionClosedError:
                return frames, "closed"
            except ConnectionClosed:
                return frames, "closed normally"
            try:
                frames.append(json.loads(raw))
            except ValueError:
                frames.append({"type": "unparsable", "raw": raw})
            if frames[-1].get("type") == "exit":
                return frames, "exit"


def _url(server: Session, scheme: str = "ws", host: str = "127.0.0.1") -> str:
    return f"{scheme}://{host}:{server.port}/v1/boxes/b1/session"


def _warm(server: Session) -> None:
    frames, ended = converse(_url(server))
    assert ended == "exit" and len(frames) == OUTPUTS + 2


def outputs(frames: list[dict]) -> int:
    return sum(1 for f in frames if f.get("type") == "stdout")


def whole_outputs_within(after_bytes: int) -> int:
    """How many output frames pass before the first one starting at or after ``after_bytes`` bytes."""
    payload = len(json.dumps({"type": "stdout", "data": "00" + "o" * 98}))
    size = payload + (2 if payload < 126 else 4)  # the frame header
    return -(-after_bytes // size)


# ------------------------------------------------------------------ plain ws://
def test_a_session_meeting_no_fault_goes_through_the_proxy_unchanged(injector, server):
    _warm(server)
    assert injector.proxy is not None and injector.proxy.tunnels == 1
    assert injector.seen["exec"] == {"ws": 1} and server.starts == 1


def test_drop_cuts_the_session_after_the_answer_and_the_given_bytes(injector, server):
    _warm(server)
    armed = injector.arm("drop", "exec", after_bytes=300)
    frames, ended = converse(_url(server))
    assert armed.fired == 1 and ended == "closed" and server.starts == 2
    assert frames[0]["type"] == "started" and outputs(frames) == 300 // (
        len(json.dumps({"type": "stdout", "data": "00" + "o" * 98})) + 4
    )  # the whole frames within 300 bytes


def test_half_close_after_the_answer_keeps_the_session_open_and_silent(injector, server):
    _warm(server)
    injector.arm("half-close", "exec")
    frames, ended = converse(_url(server), wait_s=0.5)
    assert ended == "timeout" and [f["type"] for f in frames] == ["started"] and server.starts == 2


def test_silence_accepts_the_tunnel_and_never_reaches_the_server(injector, server):
    _warm(server)
    armed = injector.arm("silence", "exec")
    with pytest.raises(TimeoutError):
        converse(_url(server), wait_s=0.5)
    assert armed.fired == 1 and server.connections == 1


def test_latency_delays_the_session_which_then_runs(injector, server):
    _warm(server)
    armed = injector.arm("latency", "exec", delay_s=0.2)
    frames, ended = converse(_url(server))
    assert armed.fired == 1 and ended == "exit" and outputs(frames) == OUTPUTS


def test_status_answers_the_upgrade_in_the_servers_place(injector, server):
    _warm(server)
    injector.arm("status", "exec", status=500, message="Internal server error")
    with pytest.raises(InvalidStatus) as refused:
        converse(_url(server))
    assert refused.value.response.status_code == 500 and json.loads(refused.value.response.body) == {
        "error": "Internal server error"
    }
    assert server.connections == 1


def test_garbage_is_a_frame_of_its_own_at_the_first_frame_past_the_bytes(injector, server):
    _warm(server)
    injector.arm("garbage", "exec", after_bytes=250, payload="}{ not json")
    frames, ended = converse(_url(server))
    assert ended == "exit" and outputs(frames) == OUTPUTS
    garbage = [i for i, f in enumerate(frames) if f["type"] == "unparsable"]
    assert len(garbage) == 1 and frames[garbage[0]]["raw"] == "}{ not json"
    assert garbage[0] == 1 + whole_outputs_within(250)  # after started and the frames within 250 bytes


def test_truncate_sends_half_a_frame_and_cuts(injector, server):
    _warm(server)
    injector.arm("truncate", "exec", after_bytes=250)
    frames, ended = converse(_url(server))
    assert ended == "closed" and outputs(frames) == whole_outputs_within(250) and server.starts == 2


def test_a_fault_for_another_sandbox_lets_this_session_through(injector, server):
    _warm(server)
    armed = injector.arm("drop", "exec", sandbox="b2")
    _, ended = converse(_url(server))
    assert ended == "exit" and armed.fired == 0


# ------------------------------------------------------------------ TLS
def _certificate(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(the server's context, a client context trusting only it) for a certificate made for localhost."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_path, key_path)
    client = ssl.create_default_context(cafile=str(cert_path))
    return server, client


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[Session, ssl.SSLContext]]:
    server_context, client_context = _certificate(tmp_path)
    session = Session(tls=server_context)
    yield session, client_context
    session.close()


def test_over_tls_the_proxy_drops_and_half_closes_after_the_answer(injector, tls_server):
    server, client = tls_server
    url = _url(server, "wss", "localhost")
    frames, ended = converse(url, ssl_context=client)
    assert ended == "exit" and outputs(frames) == OUTPUTS and injector.seen["exec"] == {"wss": 1}

    injector.arm("half-close", "exec")
    frames, ended = converse(url, ssl_context=client, wait_s=0.5)
    assert ended == "timeout" and [f["type"] for f in frames] == ["started"] and server.starts == 2

    injector.arm("drop", "exec", after_bytes=300)
    frames, ended = converse(url, ssl_context=client)
    assert ended == "closed" and frames[0]["type"] == "started" and 0 < outputs(frames) < OUTPUTS


def test_over_tls_a_fault_that_needs_the_plaintext_is_unverified(injector, tls_server):
    server, client = tls_server
    converse(_url(server, "wss", "localhost"), ssl_context=client)
    for kind in ("status", "garbage", "truncate"):
        with pytest.raises(pytest.skip.Exception) as caught:
            injector.arm(kind, "exec")
        assert caught.value.msg.startswith(UNVERIFIED_PREFIX) and "TLS" in caught.value.msg
