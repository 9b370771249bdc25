"""The forwarded endpoint: a host loopback port whose connections the box's daemon relays, once
authenticated, to the workload's port inside the box.

The daemon listens on ``127.0.0.1:HOST_PORT`` (never another address) and, for each
connection, reads the first HTTP request's head (at most ``HEAD_LIMIT`` bytes, within
``HEAD_TIMEOUT_S``) and checks the box's bearer token, which may come three ways:

- ``Authorization: Bearer TOKEN`` (MCP clients, the doctor);
- the cookie ``hermes_box_token_PORT`` (a browser after ``open``; named after the port,
  since browsers keep cookies per host, not per port);
- ``?hermes_box_token=TOKEN`` in the URL (what ``open`` hands the browser): answered
  by the relay itself with a redirect to the same URL without the parameter and the
  cookie set (HttpOnly, SameSite=Strict), so the token leaves the address bar at once.

A request without the token gets 401 and the connection is closed; nothing of it
reaches the workload.  An authenticated request is passed, with the bearer token in its
``Authorization`` header (for a workload that checks the token itself) and
``Connection: close`` (so every request comes on a connection of its own, authenticated
here), to a TCP socket made in the box's network namespace
(``NamespaceDriver.tcp_socket``) and connected to ``127.0.0.1:WORKLOAD_PORT`` there: a
``--no-network`` box is reached the same way as one sharing the host's network.  The
answer, and the rest of an upgraded connection, pass unchanged.  When the workload does
not answer, the relay answers 503 (paused by ``hb down``) or 502.
Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import contextlib
import hmac
import select
import socket
import threading
from collections.abc import Callable
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from reference.box_lite.endpoint import QUERY, cookie_name

HEAD_LIMIT = 32 * 1024
HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
CHUNK = 64 * 1024

Upstream = Callable[[float], socket.socket]  # a socket connected to the workload, within the seconds given
Why = Callable[[], str]  # why the workload does not answer ("paused" or ""), for the error page


def _reply(conn: socket.socket, status: str, body: str, extra: tuple[str, ...] = ()) -> None:
    data = body.encode()
    head = [f"HTTP/1.1 {status}", "Content-Type: text/plain; charset=utf-8", f"Content-Length: {len(data)}"]
    head += [*extra, "Cache-Control: no-store", "Connection: close", "", ""]
    with contextlib.suppress(OSError):
        conn.sendall("\r\n".join(head).encode("latin-1") + data)


class Relay:
    """The listener and its connection threads (see the module)."""

    def __init__(self, port: int, token: str, upstream: Upstream, why: Why, log: Callable[[str], None]) -> None:
        self.port = port
        self._token = token.encode()
        self._upstream = upstream
        self._why = why
        self._log = log
        self._listener: socket.socket | None = None
        self.error = ""

    def start(self) -> bool:
        """Listen on 127.0.0.1:port; False (with ``error`` saying why) when the port cannot be had."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", self.port))
            listener.listen(64)
        except OSError as exc:
            listener.close()
            self.error = f"cannot listen on 127.0.0.1:{self.port}: {exc.strerror or exc}"
            return False
        self._listener = listener
        threading.Thread(target=self._accept, name="relay", daemon=True).start()
        return True

    def close(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()

    def _accept(self) -> None:
        while self._listener is not None:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    # -- one connection -----------------------------------------------------------------------
    def _serve(self, conn: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            head, rest = self._read_head(conn)
            if head is None:
                return
            verdict = self._authenticate(head)
            if verdict == "redirect":
                location = _without_token(head)
                cookie = f"{cookie_name(self.port)}={self._token.decode()}; Path=/; HttpOnly; SameSite=Strict"
                _reply(conn, "303 See Other", "authenticated\n", (f"Location: {location}", f"Set-Cookie: {cookie}"))
                return
            if verdict != "ok":
                _reply(
                    conn,
                    "401 Unauthorized",
                    "this box's endpoint needs its token (hermes-box open NAME)\n",
                    ('WWW-Authenticate: Bearer realm="hermes-box"',),
                )
                return
            try:
                upstream = self._upstream(CONNECT_TIMEOUT_S)
            except OSError:
                if self._why() == "paused":
                    _reply(
                        conn, "503 Service Unavailable", "the box's workload is paused (hb down); hb up resumes it\n"
                    )
                else:
                    _reply(conn, "502 Bad Gateway", "the box's workload does not answer (see hb status in the box)\n")
                return
            upstream.sendall(_forwarded(head, self._token.decode()) + rest)
            _pump(conn, upstream)
        except OSError as exc:
            self._log(f"relay: a connection failed: {exc.strerror or type(exc).__name__}")
        finally:
            for sock in (conn, upstream):
                if sock is not None:
                    sock.close()

    def _read_head(self, conn: socket.socket) -> tuple[bytes | None, bytes]:
        conn.settimeout(HEAD_TIMEOUT_S)
        data = b""
        try:
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(4096)
                if not chunk:
                    return None, b""
                data += chunk
                if len(data) > HEAD_LIMIT:
                    _reply(conn, "431 Request Header Fields Too Large", "request head too large\n")
                    return None, b""
        except TimeoutError:
            return None, b""
        conn.settimeout(None)
        end = data.index(b"\r\n\r\n") + 4
        return data[:end], data[end:]

    def _authenticate(self, head: bytes) -> str:
        """ "ok", "redirect" (the token came in the URL) or "refused"."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        for line in lines[1:]:
            key, _, value = line.partition(":")
            key, value = key.strip().lower(), value.strip()
            if key == "authorization" and value[:7].lower() == "bearer ":
                if self._matches(value[7:].strip()):
                    return "ok"
            elif key == "cookie":
                morsel = SimpleCookie()
                with contextlib.suppress(Exception):
                    morsel.load(value)
                name = cookie_name(self.port)
                if name in morsel and self._matches(morsel[name].value):
                    return "ok"
        if len(parts) == 3 and parts[0] in ("GET", "HEAD"):
            query = dict(parse_qsl(urlsplit(parts[1]).query, keep_blank_values=True))
            if QUERY in query and self._matches(query[QUERY]):
                return "redirect"
        return "refused"

    def _matches(self, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(errors="replace"), self._token)


def _forwarded(head: bytes, token: str) -> bytes:
    """The request head as the workload gets it: with the bearer token (a browser brings only the
    cookie; a workload that checks the token itself accepts it) and, unless it upgrades the
    connection, ``Connection: close``, so that every request comes on a connection of its own and
    is authenticated here."""
    lines = head.decode("latin-1").split("\r\n")[:-2]
    kept = [lines[0]]
    upgrade = False
    for line in lines[1:]:
        key, _, value = line.partition(":")
        name = key.strip().lower()
        if name == "connection" and "upgrade" in value.lower():
            upgrade = True
        elif name in ("authorization", "connection", "keep-alive"):
            continue
        kept.append(line)
    kept.append(f"Authorization: Bearer {token}")
    kept.append("Connection: Upgrade" if upgrade else "Connection: close")
    return ("\r\n".join(kept) + "\r\n\r\n").encode("latin-1")


def _without_token(head: bytes) -> str:
    target = head.decode("latin-1").split("\r\n")[0].split(" ")[1]
    parts = urlsplit(target)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != QUERY]
    return urlunsplit(("", "", parts.path or "/", urlencode(query), parts.fragment))


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both directions have ended (a half-close passes on as one)."""
    peers = {a: b, b: a}
    open_reads = [a, b]
    while open_reads:
        ready, _, _ = select.select(open_reads, [], [])
        for sock in ready:
            try:
                data = sock.recv(CHUNK)
            except OSError:
                data = b""
            if data:
                try:
                    peers[sock].sendall(data)
                except OSError:
                    return
                continue
            open_reads.remove(sock)
            with contextlib.suppress(OSError):
                peers[sock].shutdown(socket.SHUT_WR)
