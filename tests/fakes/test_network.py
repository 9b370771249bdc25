"""fakes/network.py: a fixed round-trip time in front of a fake, every byte intact and never early."""

from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest

from fakes import services
from fakes.network import DelayedNetwork, delayed

RTT_S = 0.08


class Echo:
    """A loopback TCP server that sends back what it receives, and closes when the client does."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def echo():
    server = Echo()
    yield server
    server.close()


@pytest.fixture
def network(echo):
    net = DelayedNetwork(("127.0.0.1", echo.port), RTT_S)
    net.start()
    yield net
    net.stop()


def _read(sock: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:
        chunk = sock.recv(size - len(got))
        if not chunk:
            break
        got += chunk
    return got


def test_bytes_cross_intact_in_order_and_a_round_trip_is_never_shorter_than_set(network, echo):
    with socket.create_connection(("127.0.0.1", network.port)) as client:
        payload = bytes(range(256)) * 4096  # 1 MiB, every byte value, in order
        started = time.monotonic()
        client.sendall(payload[:10])
        assert _read(client, 10) == payload[:10]
        first = time.monotonic() - started
        started = time.monotonic()
        client.sendall(b"x")
        assert _read(client, 1) == b"x"
        warm = time.monotonic() - started
        sender = threading.Thread(target=client.sendall, args=(payload,))
        sender.start()
        assert _read(client, len(payload)) == payload
        sender.join()
    # A new connection's first byte waits for the handshakes (two round trips), then a round trip.
    assert first >= 3 * RTT_S - 0.005, first
    assert warm >= RTT_S - 0.005, warm
    assert network.connections == 1 and echo.accepted == 1


def test_end_of_file_crosses_too(network):
    with socket.create_connection(("127.0.0.1", network.port)) as client:
        client.sendall(b"last words")
        client.shutdown(socket.SHUT_WR)
        assert _read(client, 100) == b"last words"
        assert client.recv(10) == b"", "the server's close came through as end of file"


def test_settings_that_cannot_be_a_network_are_refused(echo, tmp_path):
    with pytest.raises(ValueError, match="negative"):
        DelayedNetwork(("127.0.0.1", echo.port), -0.01)
    with pytest.raises(ValueError, match=r"0\.\.10000 ms"):
        services.FakeOptions(rtt_ms=-1)
    with pytest.raises(ValueError, match="no network to delay"):
        services.start("tempdir", tmp_path, services.FakeOptions(rtt_ms=5))
    assert list(tmp_path.iterdir()) == [], "nothing was made for a fake that was refused"


def test_a_fake_behind_the_network_exports_the_network_and_stops_with_it(tmp_path):
    plain = services.start("deepinfra", tmp_path / "plain")
    try:
        fake = delayed(plain, RTT_S)
        url = fake.env["DEEPINFRA_BASE_URL"]
        assert url != plain.env["DEEPINFRA_BASE_URL"] and url.startswith("http://127.0.0.1:")
        assert fake.env["DEEPINFRA_API_KEY"] == plain.env["DEEPINFRA_API_KEY"]
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {fake.env['DEEPINFRA_API_KEY']}"}) as web:
            started = time.monotonic()
            assert web.get("/v1/sandboxes").status_code == 200
            assert web.get("/v1/sandboxes").status_code == 200
            elapsed = time.monotonic() - started
        assert elapsed >= 4 * RTT_S - 0.01, elapsed  # a new connection (three round trips), then one more
    finally:
        fake.stop()
    port = int(url.rsplit(":", 1)[1])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_jitter_varies_each_crossing_within_its_bound_and_never_reorders_bytes(echo):
    net = DelayedNetwork(("127.0.0.1", echo.port), 0.02, jitter_s=0.03, handshake_rtts=0, seed=7)
    net.start()
    try:
        with socket.create_connection(("127.0.0.1", net.port)) as client:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            trips = []
            for i in range(12):
                started = time.monotonic()
                client.sendall(bytes([i]))
                assert _read(client, 1) == bytes([i])
                trips.append(time.monotonic() - started)
            burst = b"".join(i.to_bytes(2, "big") for i in range(5000))
            for i in range(0, len(burst), 100):  # many small crossings, each drawing its own delay
                client.sendall(burst[i : i + 100])
            assert _read(client, len(burst)) == burst, "a later chunk overtook an earlier one"
    finally:
        net.stop()
    assert min(trips) >= 0.02 - 0.005 and max(trips) <= 0.02 + 2 * 0.03 + 0.05, trips
    assert max(trips) - min(trips) > 0.005, f"the round trips did not vary: {trips}"
