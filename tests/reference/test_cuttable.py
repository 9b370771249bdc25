"""reference/common/cuttable.py: a request blocked before its response begins can be cut from another thread,
and a cut never reaches a connection another request uses or one idle in the pool."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from reference.common.cuttable import ThreadSockets


class Server:
    """A loopback HTTP/1.1 server: ``/ok`` answers at once (keep-alive), ``/silent`` never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                data += chunk
                while b"\r\n\r\n" in data:
                    head, data = data.split(b"\r\n\r\n", 1)
                    if head.split()[1] == b"/silent":
                        continue  # accepted, never answered: the client must cut it
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    yield srv
    srv.sock.close()


def _client(port: int) -> tuple[httpx.Client, ThreadSockets]:
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    sockets = ThreadSockets.install(client)
    assert sockets is not None, "httpx's client no longer offers the pool seam ThreadSockets uses"
    return client, sockets


def test_every_pool_of_a_client_behind_a_proxy_gets_the_one_backend(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # the environment's proxy: a pool of its own
    client = httpx.Client(base_url="https://example.invalid")
    sockets = ThreadSockets.install(client)
    pools = [client._transport._pool, *(t._pool for t in client._mounts.values() if t is not None)]
    assert sockets is not None and len(pools) >= 2
    assert all(pool._network_backend is sockets for pool in pools)
    client.close()


def test_a_request_waiting_for_its_first_byte_is_cut(server):
    client, sockets = _client(server.port)
    outcome: list[BaseException | httpx.Response] = []
    started = threading.Event()

    def blocked() -> None:
        started.set()
        try:
            outcome.append(client.get("/silent"))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    started.wait()
    deadline = time.monotonic() + 5
    while not sockets.cut(thread.ident or 0):  # cut once the request has written
        assert time.monotonic() < deadline, "the blocked thread never used a socket"
        time.sleep(0.01)
    thread.join(5)
    assert not thread.is_alive(), "the cut did not wake the thread blocked in its read"
    assert isinstance(outcome[0], httpx.TransportError), outcome
    client.close()


def test_a_cut_never_reaches_an_idle_pooled_connection_or_another_thread(server):
    client, sockets = _client(server.port)
    assert client.get("/ok").text == "ok"
    sockets.forget()
    assert not sockets.cut(threading.get_ident()), "a forgotten thread's idle pooled connection was cut"
    assert client.get("/ok").text == "ok"  # the pooled connection still serves

    other: list[int] = []

    def elsewhere() -> None:
        client.get("/ok")  # takes the pooled connection this thread used before
        other.append(threading.get_ident())

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join(5)
    assert not sockets.cut(threading.get_ident()), "this thread's last connection is now the other thread's"
    assert client.get("/ok").text == "ok"
    assert server.connections == 1, "a request opened a new connection: the pooled one was cut or lost"
    client.close()
