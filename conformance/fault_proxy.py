"""A loopback HTTP CONNECT proxy that faults the WebSocket connections passing through it
(conformance/tcp_proxy.py builds the raw TCP proxy of ``--client-faults tcp:HOST:PORT`` on its plumbing).

For clients the kit cannot reach inside (a WebSocket library, a raw TCP
client), faults are injected between the client and the server: the client
is pointed at this proxy (WebSocket clients of the ``websockets`` package
follow ``ws_proxy`` / ``wss_proxy``), asks it to CONNECT to the real server,
and every byte then passes through here.  For each tunnel the proxy asks
``decide(path, tls)`` which fault it meets (None: none), and applies it:

- ``latency``: wait ``delay_s`` before connecting to the server;
- ``silence``: accept the tunnel and never reach the server or answer;
- ``drop``: pass ``after_bytes`` bytes from the server, then cut both ends;
- ``half-close``: pass ``after_bytes`` bytes, then send the client nothing
  more (the server's bytes are read and discarded) while keeping its
  connection open and passing everything the client sends;
- on plain connections only (ws://, where the proxy reads the HTTP upgrade):
  ``status`` answers the upgrade with that status and ``{"error": message}``;
  ``garbage`` inserts a text frame holding the payload and ``truncate`` sends
  half a frame then cuts (conformance/damage.py says which frame).

Over TLS the proxy sees only encrypted records, so it cannot read a path,
answer with a status or damage a frame; ``decide`` is told ``tls=True`` and
must not return those kinds.

Where a fault acts: a fake taps a session's output after the session has
started the command (Upstash's ``started`` frame), so ``after_bytes`` here
counts the server's bytes past its answer to the client's first message.  On
ws:// that is exact: the first frame the server sends after the client's
first frame passes uncounted.  Over TLS the proxy counts turns of
application-data records instead (the client's upgrade request, the
server's 101, the client's first message, the server's answer); a TLS 1.3
client's Finished (a short application data record before the upgrade
request) starts no turn, so session tickets sent in answer to it do not
move the fault.  That is an inference from record sizes and order, not a
reading: a protocol whose client speaks twice before the server answers
moves the fault.
"""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
from collections.abc import Callable
from http import HTTPStatus

from conformance.damage import Cutter
from fakes.faults import Fault

logger = logging.getLogger("conformance.fault_proxy")

HEAD_LIMIT = 64 * 1024
CONNECT_TIMEOUT_S = 10.0
CHUNK = 64 * 1024
TLS_HANDSHAKE = 0x16
TLS_APPLICATION_DATA = 23
# Longest TLS 1.3 client Finished record payload (SHA-384: 48-byte verify data, header, type, 16-byte tag)
# with room for padding; a WebSocket upgrade request is always longer.
FINISHED_MAX = 100

# How a connection's bytes are read: WebSocket frames (ws://) or TLS records.
WS, TLS = "ws", "tls"

Decide = Callable[[str | None, bool], Fault | None]


class _Gone(Exception):
    """A tunnel's client or server went away, or the proxy is stopping."""


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """(an HTTP head up to its blank line, bytes read past it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > HEAD_LIMIT:
            raise _Gone("head too long")
        chunk = sock.recv(CHUNK)
        if not chunk:
            raise _Gone("closed before the end of the head")
        data += chunk
    end = data.index(b"\r\n\r\n") + 4
    return data[:end], data[end:]


def _target(head: bytes) -> str | None:
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    if len(parts) == 3 and parts[0].upper() == "CONNECT":
        return parts[1]
    return None


def _path(head: bytes) -> str | None:
    parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    return parts[1] if len(parts) == 3 and parts[1].startswith("/") else None


def text_frame(payload: bytes) -> bytes:
    """An unmasked WebSocket text frame (server to client)."""
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", 0x81, n)
    elif n < 1 << 16:
        header = struct.pack("!BBH", 0x81, 126, n)
    else:
        header = struct.pack("!BBQ", 0x81, 127, n)
    return header + payload


class _Frames:
    """Splits a WebSocket byte stream into whole frames."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        frames = []
        while len(self.buffer) >= 2:
            size, offset = self.buffer[1] & 0x7F, 2
            if size == 126:
                if len(self.buffer) < 4:
                    break
                size, offset = struct.unpack("!H", self.buffer[2:4])[0], 4
            elif size == 127:
                if len(self.buffer) < 10:
                    break
                size, offset = struct.unpack("!Q", self.buffer[2:10])[0], 10
            if self.buffer[1] & 0x80:
                offset += 4
            if len(self.buffer) < offset + size:
                break
            frames.append(self.buffer[: offset + size])
            self.buffer = self.buffer[offset + size :]
        return frames


class _Records:
    """Splits a TLS byte stream into whole records."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        records = []
        while len(self.buffer) >= 5:
            size = 5 + struct.unpack("!H", self.buffer[3:5])[0]
            if len(self.buffer) < size:
                break
            records.append(self.buffer[:size])
            self.buffer = self.buffer[size:]
        return records


def _carries_data(unit: bytes, tls: bool) -> bool:
    """A frame (ws://) or an application data record (TLS): a message of the conversation."""
    return not tls or unit[0] == TLS_APPLICATION_DATA


class _Position:
    """Where a tunnel's conversation is: the server's bytes count once it has answered the client's first
    message (the client's first turn on ws://; its second over TLS, the first being the upgrade).

    Over TLS 1.3 the client's Finished is an application data record too, and a server may answer it
    (session tickets) before the upgrade request arrives; a first record too short to hold an upgrade
    request is that Finished and starts no turn."""

    def __init__(self, tls: bool):
        self.tls = tls
        self.message_turn = 2 if tls else 1
        self.lock = threading.Lock()
        self.client_turns = 0
        self.client_records = 0
        self.last: str | None = None
        self.answered = False

    def client(self, unit: bytes) -> None:
        with self.lock:
            self.client_records += 1
            if self.tls and self.client_records == 1 and len(unit) - 5 <= FINISHED_MAX:
                return
            if self.last != "client":
                self.client_turns += 1
            self.last = "client"

    def server(self) -> bool:
        """Note a server message; True when it counts (it comes after the answer)."""
        with self.lock:
            self.last = "server"
            if self.answered:
                return True
            if self.client_turns >= self.message_turn:
                self.answered = True  # this message is the answer: it passes uncounted
            return False


class FaultProxy:
    """Serves CONNECT tunnels on 127.0.0.1, faulting each as ``decide`` says."""

    def __init__(self, decide: Decide):
        self._decide = decide
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self.address = ""
        self.tunnels = 0  # tunnels opened, for tests and diagnostics

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> str:
        """Listen on an ephemeral loopback port; returns the proxy URL (http://127.0.0.1:PORT)."""
        self.address = f"http://127.0.0.1:{self._listen()}"
        return self.address

    def _listen(self) -> int:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listener = listener
        self._spawn(self._accept, "kit-fault-proxy")
        return int(listener.getsockname()[1])

    def stop(self) -> None:
        """Close the listener and every tunnel; a held (silent, half-closed) connection ends too."""
        self._stopping.set()
        if self._listener is not None:
            self._close(self._listener)
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            self._close(sock)
        for thread in list(self._threads):
            if thread is not threading.current_thread():
                thread.join(2.0)

    # -- plumbing -----------------------------------------------------------------------------
    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=name)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.add(sock)
        if self._stopping.is_set():
            self._close(sock)

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._track(client)
            self._spawn(self._serve, "kit-fault-proxy-tunnel", client)

    def _hold(self, client: socket.socket) -> None:
        """Keep ``client``'s connection open, reading and discarding, until it leaves or the proxy stops."""
        try:
            while client.recv(CHUNK):
                pass
        except OSError:
            pass

    # -- one tunnel ---------------------------------------------------------------------------
    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            head, rest = _read_head(client)
            target = _target(head)
            if target is None or rest:
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            first = client.recv(1, socket.MSG_PEEK)
            if not first:
                return
            tls = first[0] == TLS_HANDSHAKE
            request, early = (b"", b"") if tls else _read_head(client)
            fault = self._decide(None if tls else _path(request), tls)
            with self._lock:
                self.tunnels += 1
            if fault is not None and fault.kind == "status" and not tls:
                self._answer(client, fault)
                return
            host, _, port = target.rpartition(":")
            upstream = self._forward(client, fault, (host.strip("[]"), int(port)), request + early, TLS if tls else WS)
        except (_Gone, OSError, ValueError) as exc:
            logger.debug("fault proxy tunnel ended: %s", exc)
        finally:
            if upstream is not None:
                self._close(upstream)
            self._close(client)

    def _forward(
        self, client: socket.socket, fault: Fault | None, target: tuple[str, int], early: bytes, mode: str
    ) -> socket.socket | None:
        """One connection from its fault on: stall it, delay it, or connect to ``target`` and pass bytes
        both ways through the fault (``early``: the client's bytes already read).  Returns the server's
        socket, for the caller to close."""
        kind = fault.kind if fault is not None else None
        if kind == "silence":
            self._hold(client)
            return None
        if kind == "latency":
            assert fault is not None
            if self._stopping.wait(fault.delay_s):
                return None
        upstream = socket.create_connection(target, timeout=CONNECT_TIMEOUT_S)
        upstream.settimeout(None)
        self._track(upstream)
        if early:
            upstream.sendall(early)
        damaging = fault if kind in ("drop", "half-close", "garbage", "truncate") else None
        self._tunnel(client, upstream, damaging, mode)
        return upstream

    def _answer(self, client: socket.socket, fault: Fault) -> None:
        body = json.dumps({"error": fault.message}).encode()
        try:
            reason = HTTPStatus(fault.status).phrase
        except ValueError:
            reason = "Error"
        client.sendall(
            f"HTTP/1.1 {fault.status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )

    def _tunnel(self, client: socket.socket, upstream: socket.socket, fault: Fault | None, mode: str) -> None:
        """Pass bytes both ways until the client leaves; server -> client through ``fault``."""
        position = _Position(mode == TLS) if fault is not None else None
        up = threading.Thread(
            target=self._to_server, args=(client, upstream, position, mode), daemon=True, name="kit-fault-proxy-up"
        )
        up.start()
        action = self._to_client(client, upstream, fault, position, mode)
        if action == "drop":
            return  # the caller closes both ends
        if action == "half-close":
            self._discard(upstream)  # the server's bytes go nowhere; the client's still reach it
        else:
            try:
                client.shutdown(socket.SHUT_WR)  # the server finished: pass its end on
            except OSError:
                return
        up.join()  # until the client leaves (or stop() closes the sockets)

    def _to_server(self, client: socket.socket, upstream: socket.socket, position: _Position | None, mode: str) -> None:
        """Client -> server, unchanged (noting the client's messages); ends the server's side when the
        client stops sending."""
        tls = mode == TLS
        units = (_Records() if tls else _Frames()) if position is not None else None
        try:
            while True:
                data = client.recv(CHUNK)
                if not data:
                    break
                if units is not None and position is not None:
                    for unit in units.feed(data):
                        if _carries_data(unit, tls):
                            position.client(unit)
                upstream.sendall(data)
            upstream.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _to_client(
        self, client: socket.socket, upstream: socket.socket, fault: Fault | None, position: _Position | None, mode: str
    ) -> str | None:
        """Server -> client through the fault, until the server ends or the fault acts; returns its action
        (``"drop"``, ``"half-close"``) or None; only the server's bytes past its answer count (``position``)."""
        if fault is None:
            try:
                while data := upstream.recv(CHUNK):
                    client.sendall(data)
            except OSError:
                return "drop"
            return None
        tls = mode == TLS
        payload = fault.payload.encode("utf-8", "replace")
        cutter = Cutter(fault.kind, fault.after_bytes, text_frame(payload))
        units = _Records() if tls else _Frames()
        head_pending, head = mode == WS, b""  # ws://: the upgrade response passes as it is
        try:
            while data := upstream.recv(CHUNK):
                if head_pending:
                    head += data
                    if b"\r\n\r\n" not in head:
                        continue
                    end = head.index(b"\r\n\r\n") + 4
                    client.sendall(head[:end])
                    data, head_pending = head[end:], False
                for unit in units.feed(data):
                    if position is not None and not (_carries_data(unit, tls) and position.server()):
                        client.sendall(unit)
                        continue
                    pieces, action = cutter.feed(unit)
                    for piece in pieces:
                        if piece:
                            client.sendall(piece)
                    if action is not None:
                        return action
            pieces, action = cutter.end()
            for piece in pieces:
                if piece:
                    client.sendall(piece)
            return action
        except OSError:
            return "drop"

    def _discard(self, upstream: socket.socket) -> None:
        try:
            while upstream.recv(CHUNK):
                pass
        except OSError:
            pass
