"""The TCP fault proxy (``--client-faults tcp:HOST:PORT``) between real sockets and a real loopback server.

The server sends a fixed blob the moment a connection opens (the talk a
protocol has before any command), then keeps everything the client sends
(echoing it back where a test asks) until the client leaves, so each test
can see byte for byte what passed each way and when each end closed.
Faults are armed by role through the client-side injector, as the transport
checks arm them, and taken by a new connection as it opens or by a kept one
when its client sends again.  The last tests run the line-exec service
(fakes/line_exec) through the proxy: a real bash command whose connection is
dropped is killed on the service's side, and certify runs the transport
checks against line_exec, a connection per command or one kept for all.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance import contract, fault_routes
from conformance.client_faults import NEW_CONNECTION, REUSED_CONNECTION, ClientFaults
from conformance.errors import RouteTableError
from conformance.fault_routes import TCP_PROXY_HOST_VAR, TCP_PROXY_PORT_VAR, TCP_PROXY_VAR
from conformance.tcp_proxy import PAUSE_S
from conformance.verdicts import UNVERIFIED_PREFIX

BLOB = bytes(range(256)) * 32  # 8 KiB, every byte value
QUIET_S = 0.5  # how long "nothing arrives" is watched for
ACTED_S = PAUSE_S * 3  # long enough a quiet server for a fault waiting on its pause to have acted


class _Conn:
    def __init__(self, opened_at: float):
        self.opened_at = opened_at
        self.received = bytearray()
        self.closed = threading.Event()  # the client's side ended (EOF or reset)


class BlobServer:
    """Sends ``opening`` on every new connection (its pieces ``pause_s`` apart), then records what the
    client sends until it leaves, echoing it back when ``echo``."""

    def __init__(self, opening: tuple[bytes, ...] = (BLOB,), *, pause_s: float = 0.0, echo: bool = False) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conns: list[_Conn] = []
        self.opening, self.pause_s, self.echo = opening, pause_s, echo
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            conn = _Conn(time.monotonic())
            self.conns.append(conn)
            threading.Thread(target=self._serve, args=(sock, conn), daemon=True).start()

    def _serve(self, sock: socket.socket, conn: _Conn) -> None:
        try:
            for i, piece in enumerate(self.opening):
                if i:
                    time.sleep(self.pause_s)
                sock.sendall(piece)
            while data := sock.recv(65536):
                conn.received += data
                if self.echo:
                    sock.sendall(data)
        except OSError:
            pass
        finally:
            conn.closed.set()
            sock.close()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()


@pytest.fixture
def server() -> Iterator[BlobServer]:
    blob = BlobServer()
    yield blob
    blob.close()


@pytest.fixture
def injector(server: BlobServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClientFaults]:
    faults = ClientFaults(fault_routes.tcp(f"tcp:127.0.0.1:{server.port}"))
    faults.start(monkeypatch.setenv)
    yield faults
    faults.stop()


@pytest.fixture
def echo_server() -> Iterator[BlobServer]:
    blob = BlobServer(echo=True)
    yield blob
    blob.close()


@pytest.fixture
def echo_injector(echo_server: BlobServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClientFaults]:
    faults = ClientFaults(fault_routes.tcp(f"tcp:127.0.0.1:{echo_server.port}"))
    faults.start(monkeypatch.setenv)
    yield faults
    faults.stop()


def _proxy() -> tuple[str, int]:
    return os.environ[TCP_PROXY_HOST_VAR], int(os.environ[TCP_PROXY_PORT_VAR])


def _read(sock: socket.socket, *, quiet_s: float = QUIET_S, until: int | None = None) -> tuple[bytes, str]:
    """Everything the proxy passes until the connection ends, stays quiet, or ``until`` bytes came:
    (bytes, "eof"|"open")."""
    sock.settimeout(quiet_s)
    data = b""
    while until is None or len(data) < until:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return data, "open"
        except ConnectionResetError:
            return data, "eof"
        if not chunk:
            return data, "eof"
        data += chunk
    return data, "open"


def _warm(server: BlobServer) -> None:
    """One unfaulted connection: the injector has seen the backend's exec channel (as a check's warm-up)."""
    with socket.create_connection(_proxy(), timeout=5) as sock:
        data, _ = _read(sock, quiet_s=2, until=len(BLOB))
    assert data == BLOB


def test_the_run_exports_the_proxy_address_and_every_byte_passes_both_ways(server, injector):
    host, port = _proxy()
    assert os.environ[TCP_PROXY_VAR] == f"{host}:{port}" and host == "127.0.0.1" and port != server.port
    upload = os.urandom(300_000)
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(upload)
        data, ended = _read(sock)
        assert (data, ended) == (BLOB, "open")  # the server keeps its side open: so does the proxy
        sock.shutdown(socket.SHUT_WR)
        assert server.conns[0].closed.wait(5), "the client's end of stream never reached the server"
    assert bytes(server.conns[0].received) == upload


def test_drop_lets_the_opening_talk_pass_and_cuts_both_ends_at_the_servers_pause(server, injector):
    _warm(server)
    armed = injector.arm("drop", "exec", after_bytes=1000)
    with socket.create_connection(_proxy(), timeout=5) as sock:
        data, ended = _read(sock, quiet_s=5)
        assert armed.fired == 1 and injector.landed(armed) == NEW_CONNECTION
        # the opening is one burst: a fault counted from the connection's first byte would land in it
        assert (data, ended) == (BLOB, "eof")
        # the server's side is cut too, although the client has not closed its own
        assert server.conns[-1].closed.wait(5), "the server's connection stayed open after the drop"


def test_a_pause_counts_only_once_the_faults_bytes_passed():
    paced = BlobServer((b"a" * 1000, b"b" * 1000), pause_s=PAUSE_S * 3)
    faults = ClientFaults(fault_routes.tcp(f"tcp:127.0.0.1:{paced.port}"))
    env: dict[str, str] = {}
    faults.start(env.__setitem__)
    try:
        host, port = env[TCP_PROXY_HOST_VAR], int(env[TCP_PROXY_PORT_VAR])
        with socket.create_connection((host, port), timeout=5) as sock:
            _read(sock, quiet_s=5, until=2000)
        faults.arm("drop", "exec", after_bytes=1500)
        with socket.create_connection((host, port), timeout=5) as sock:
            data, ended = _read(sock, quiet_s=5)
        assert (data, ended) == (b"a" * 1000 + b"b" * 1000, "eof")  # the first pause came after 1000 bytes only
    finally:
        faults.stop()
        paced.close()


def test_half_close_stops_sending_to_the_client_and_keeps_both_connections_open(echo_server, echo_injector):
    _warm(echo_server)
    echo_injector.arm("half-close", "exec")
    with socket.create_connection(_proxy(), timeout=5) as sock:
        data, _ = _read(sock, quiet_s=5, until=len(BLOB))
        assert data == BLOB
        time.sleep(ACTED_S)  # the server's pause: the half-close acts
        sock.sendall(b"kill\n")  # what the client sends still reaches the server, whose echo goes nowhere
        deadline = time.monotonic() + 5
        while bytes(echo_server.conns[-1].received) != b"kill\n" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert bytes(echo_server.conns[-1].received) == b"kill\n"
        assert _read(sock) == (b"", "open")
        assert not echo_server.conns[-1].closed.is_set()
    assert echo_server.conns[-1].closed.wait(5), "the client left, and the server's connection stayed open"


def test_a_kept_connection_meets_the_fault_when_its_client_next_sends(echo_server, echo_injector):
    with socket.create_connection(_proxy(), timeout=5) as sock:
        assert _read(sock, quiet_s=5, until=len(BLOB))[0] == BLOB  # the exec channel is seen
        armed = echo_injector.arm("drop", "exec")
        time.sleep(ACTED_S)
        assert armed.fired == 0, "an idle connection met a fault before its client sent anything"
        sock.sendall(b"run this\n")
        data, ended = _read(sock, quiet_s=5)
        assert armed.fired == 1 and echo_injector.landed(armed) == REUSED_CONNECTION
        assert (data, ended) == (b"run this\n", "eof")  # the server's answer passed; the pause after it cut
    assert len(echo_server.conns) == 1


def test_a_stall_on_a_kept_connection_holds_both_ways_until_the_fault_is_cleared(echo_server, echo_injector):
    with socket.create_connection(_proxy(), timeout=5) as sock:
        assert _read(sock, quiet_s=5, until=len(BLOB))[0] == BLOB
        echo_injector.arm("silence", "exec")
        sock.sendall(b"run this\n")
        assert _read(sock) == (b"", "open")
        assert bytes(echo_server.conns[0].received) == b"", "a stalled command reached the server"
        echo_injector.clear()  # what the fault held is let go: the connection ends
        assert _read(sock, quiet_s=5) == (b"", "eof")


def test_clearing_cuts_a_half_closed_connection(echo_server, echo_injector):
    _warm(echo_server)
    echo_injector.arm("half-close", "exec")
    with socket.create_connection(_proxy(), timeout=5) as sock:
        assert _read(sock, quiet_s=5, until=len(BLOB))[0] == BLOB
        time.sleep(ACTED_S)
        echo_injector.clear()
        assert _read(sock, quiet_s=5) == (b"", "eof")
    assert echo_server.conns[0].closed.wait(5)


def test_stall_accepts_the_connection_and_never_reaches_the_server(server, injector):
    _warm(server)
    injector.arm("silence", "exec")
    with socket.create_connection(_proxy(), timeout=5) as sock:
        sock.sendall(b"hello\n")
        data, ended = _read(sock)
        assert (data, ended) == (b"", "open")
    time.sleep(0.1)
    assert len(server.conns) == 1, "a stalled connection reached the server"


def test_delay_waits_before_connecting_then_passes_everything(server, injector):
    _warm(server)
    injector.arm("latency", "exec", delay_s=0.6)
    started = time.monotonic()
    with socket.create_connection(_proxy(), timeout=5) as sock:
        data, _ = _read(sock, quiet_s=3, until=len(BLOB))
    assert data == BLOB
    assert server.conns[-1].opened_at - started >= 0.6


def test_faults_are_decided_per_connection(server, injector):
    _warm(server)
    armed = injector.arm("drop", "exec", after_bytes=10, times=1)
    with (
        socket.create_connection(_proxy(), timeout=5) as first,
        socket.create_connection(_proxy(), timeout=5) as second,
    ):
        got = sorted([_read(first, quiet_s=ACTED_S), _read(second, quiet_s=ACTED_S)], key=lambda r: r[1])
    assert armed.fired == 1
    assert got == [(BLOB, "eof"), (BLOB, "open")]


def test_kinds_the_proxy_cannot_apply_leave_their_check_unverified(server, injector):
    # before any connection: an exec fault would never fire
    with pytest.raises(pytest.skip.Exception, match=f"{UNVERIFIED_PREFIX}.*TCP proxy"):
        injector.arm("drop", "exec")
    _warm(server)
    for kind in ("status", "garbage", "truncate"):
        with pytest.raises(pytest.skip.Exception, match="raw TCP connections"):
            injector.arm(kind, "exec")
    # create and read have no route: the injector cannot answer them with a status
    for role in ("create", "read"):
        with pytest.raises(pytest.skip.Exception, match=UNVERIFIED_PREFIX):
            injector.arm("status", role, status=429)
    # what it can apply to them arms nothing, and fires never
    assert injector.arm("silence", "read", times=-1).fired == 0


@pytest.mark.parametrize(
    "spec", ["tcp:", "tcp:127.0.0.1", "tcp:127.0.0.1:0", "tcp:127.0.0.1:70000", "tcp::22", "tcp:a:b:22", "tcp:h:x"]
)
def test_a_malformed_endpoint_is_an_error_naming_the_form(spec):
    with pytest.raises(RouteTableError) as caught:
        fault_routes.resolve(spec, vendor_hint=None)
    assert spec in str(caught.value) and "tcp:HOST:PORT" in str(caught.value)


def test_endpoints_parse_with_ipv6_and_names():
    assert fault_routes.tcp("tcp:[::1]:2222").tcp_target == ("::1", 2222)
    assert fault_routes.tcp("tcp:ssh.example.com:22").name == "tcp:ssh.example.com:22"


# ------------------------------------------------------------------ a real service behind the proxy
@pytest.fixture
def line_exec(monkeypatch: pytest.MonkeyPatch) -> Iterator[ClientFaults]:
    from fakes.line_exec.server import LineExecServer

    service = LineExecServer().start()
    faults = ClientFaults(fault_routes.tcp(f"tcp:{service.address}"))
    faults.start(monkeypatch.setenv)
    yield faults
    faults.stop()
    service.stop()


def _exec(command: str, *, wait_s: float = 10) -> tuple[bytes, str]:
    with socket.create_connection(_proxy(), timeout=5) as sock:
        sock.sendall(
            json.dumps({"argv": ["bash", "-c", command], "env": {"PATH": os.environ["PATH"]}}).encode() + b"\n"
        )
        return _read(sock, quiet_s=wait_s)


def test_a_dropped_command_is_killed_by_the_service_behind_the_proxy(line_exec, tmp_path):
    reply, ended = _exec("echo warm")
    assert b'{"exit": 0}' in reply and ended == "eof"
    marker = tmp_path / "survived"
    line_exec.arm("drop", "exec", after_bytes=2048)
    reply, ended = _exec(f"head -c 4096 /dev/zero | tr '\\0' s; echo; sleep 1; touch {marker}; exit 7")
    # the greeting and the command's output passed; the cut came in its pause
    assert ended == "eof" and reply.count(b"s") >= 4096 and b'"exit"' not in reply
    time.sleep(1.5)
    assert not marker.exists(), "the service kept running a command whose connection was dropped"


# ------------------------------------------------------------------ certify through the proxy
TRANSPORT = sorted(c.id for c in contract.load().clauses if "transport-faults" in c.capabilities)
# What a proxy that cannot read the protocol cannot do: answer in the service's place, damage a frame.
NEEDS_PLAINTEXT = {
    "faults.create-rate-limited",
    "faults.read-5xx-retried",
    "faults.exec-5xx-not-retried",
    "faults.damaged-frame",
}


def _certify(
    tmp_path: Path, backend: str, select: str, *, hello_pause_s: float = 0.0
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """certify a line_exec backend with its commands through the kit's TCP proxy, pointed there by
    --backend-config (the proxy's address is the run's $HERMES_KIT_TCP_PROXY)."""
    from fakes.line_exec.server import LineExecServer

    config = tmp_path / "backend.yaml"
    config.write_text(f"env:\n  LINE_EXEC_ADDR: ${{{TCP_PROXY_VAR}}}\n")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HERMES_", "LINE_EXEC_"))}
    service = LineExecServer(hello_pause_s=hello_pause_s).start()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "conformance.cli",
                "certify",
                "--backend",
                backend,
                "--backend-config",
                str(config),
                f"--client-faults=tcp:{service.address}",
                "--select",
                select,
                "--workers",
                "0",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            env=env,
        )
        connections = service.connections
    finally:
        service.stop()
    report = json.loads((out / "report.json").read_text())
    assert connections > 0, "no command reached the service"
    assert report["backend"]["transport_faults"].startswith(f"client-side (tcp:{service.address}")
    return proc, report


def _transport_verdicts(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in report["clauses"] if c["id"] in TRANSPORT}


@pytest.mark.suite
@pytest.mark.parametrize("backend", ["provider", "pooled"])
def test_certify_over_raw_tcp_gives_the_transport_clauses_verdicts(tmp_path, backend):
    # provider: a connection per command, whose greeting (3 KiB, before any command) a fault counted
    # from the first byte would hit; pooled: one connection kept for every command
    proc, report = _certify(tmp_path, f"fakes.line_exec:{backend}", "transport")
    verdicts = _transport_verdicts(report)
    assert len(verdicts) >= 8 and set(NEEDS_PLAINTEXT) < set(verdicts)
    assert {cid: v for cid, v in verdicts.items() if cid not in NEEDS_PLAINTEXT} == dict.fromkeys(
        sorted(set(verdicts) - NEEDS_PLAINTEXT), "pass"
    ), proc.stdout[-3000:]
    assert {cid: verdicts[cid] for cid in NEEDS_PLAINTEXT} == dict.fromkeys(NEEDS_PLAINTEXT, "unverified")


@pytest.mark.suite
@pytest.mark.parametrize("backend", ["lost_is_success", "pooled_lost_is_success"])
def test_certify_over_raw_tcp_fails_a_backend_that_reads_a_dropped_connection_as_success(tmp_path, backend):
    proc, report = _certify(tmp_path, f"fakes.line_exec:{backend}", "faults.dropped-mid-command,faults.half-closed")
    verdicts = {c["id"]: c["verdict"] for c in report["clauses"] if c["verdict"] != "not-run"}
    assert verdicts == {"faults.dropped-mid-command": "fail", "faults.half-closed": "pass"}, proc.stdout[-3000:]
    reason = next(c["reason"] for c in report["clauses"] if c["id"] == "faults.dropped-mid-command")
    landed = REUSED_CONNECTION if backend.startswith("pooled") else NEW_CONNECTION
    assert "a lost stream read as success" in reason and f"({landed})" in reason, reason


@pytest.mark.suite
def test_a_fault_that_meets_a_slow_handshake_leaves_its_clause_unverified(tmp_path):
    # The service waits before it reads the first command: the proxy sees a pause before any command
    # ran, so a drop lands there.  The command never started: no verdict, and never a failure.
    proc, report = _certify(
        tmp_path, "fakes.line_exec:provider", "faults.dropped-mid-command", hello_pause_s=PAUSE_S * 3
    )
    clause = next(c for c in report["clauses"] if c["id"] == "faults.dropped-mid-command")
    assert clause["verdict"] == "unverified", proc.stdout[-3000:]
    assert "never started" in clause["reason"] and "pause" in clause["reason"], clause["reason"]


def test_a_config_naming_the_proxy_without_tcp_faults_says_which_option_sets_it(tmp_path, monkeypatch):
    from conformance import config
    from conformance.errors import BackendConfigError

    monkeypatch.delenv(TCP_PROXY_VAR, raising=False)
    path = tmp_path / "backend.yaml"
    path.write_text(f"env:\n  LINE_EXEC_ADDR: ${{{TCP_PROXY_VAR}}}\n")
    with pytest.raises(BackendConfigError) as caught:
        config.load(str(path), set())
    assert "--client-faults=tcp:HOST:PORT" in str(caught.value)
    # checked before the run, which exports it itself
    checked = config.load(str(path), set(), run_sets=fault_routes.run_variables("tcp:127.0.0.1:22"))
    assert checked.env == {"LINE_EXEC_ADDR": ""}


def test_terminal_values_take_the_proxys_port(tmp_path, monkeypatch):
    from conformance import config
    from conformance.errors import BackendConfigError

    path = tmp_path / "backend.yaml"
    path.write_text("terminal:\n  ssh_host: 127.0.0.1\n  ssh_port: ${HERMES_KIT_TCP_PROXY_PORT}\n  persistent: true\n")
    monkeypatch.delenv("HERMES_KIT_TCP_PROXY_PORT", raising=False)
    with pytest.raises(BackendConfigError) as caught:
        config.load(str(path), set())
    assert "terminal.ssh_port" in str(caught.value) and "--client-faults=tcp:HOST:PORT" in str(caught.value)
    monkeypatch.setenv("HERMES_KIT_TCP_PROXY_PORT", "40123")
    assert config.load(str(path), set()).terminal == {"ssh_host": "127.0.0.1", "ssh_port": "40123", "persistent": True}
