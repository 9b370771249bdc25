"""A bounded, authenticated MCP handshake over streamable HTTP (standard library only).

``handshake(connect, path=..., token=..., timeout=...)`` is what the doctor's MCP rows
ask of a workload, on the host (``hermes-box doctor``: through a socket in the box's
network namespace, and through the forwarded host port) and inside the box (``hb
doctor``, whose Python has nothing but the standard library, which is why this module
uses ``http.client`` and not an HTTP library):

1. POST ``initialize`` with the bearer token; the answer must be HTTP 200, of type
   ``application/json`` or ``text/event-stream`` (one SSE event carrying the JSON-RPC
   response), a JSON-RPC result for the request's id naming a protocol version this
   probe speaks, the server's capabilities and its name, and an ``Mcp-Session-Id``;
2. POST ``notifications/initialized`` in that session: it must be accepted (2xx);
3. DELETE the session, best effort (a server may refuse with 405).

A bare TCP listener, a non-HTTP answer, a 404, a 500 or a malformed result fails,
each with its own detail.  The token never appears in a detail.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

PROTOCOL_VERSION = "2025-06-18"  # the version the probe asks for
KNOWN_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MAX_BODY = 256 * 1024

Connect = Callable[[float], socket.socket]  # a connected socket, within the seconds given


@dataclass(frozen=True)
class Outcome:
    ok: bool
    detail: str
    protocol: str = ""


class _Failed(Exception):
    pass


class _Connection(http.client.HTTPConnection):
    """An HTTP/1.1 connection over a socket the caller makes (a box's namespace, a host port)."""

    def __init__(self, connect: Connect, host: str, timeout: float) -> None:
        super().__init__(host, timeout=timeout)
        self._make = connect

    def connect(self) -> None:
        self.sock = self._make(self.timeout if isinstance(self.timeout, (int, float)) else 5.0)
        self.sock.settimeout(self.timeout if isinstance(self.timeout, (int, float)) else 5.0)


def handshake(connect: Connect, *, path: str, token: str, timeout: float, host: str = "127.0.0.1") -> Outcome:
    """The MCP handshake within ``timeout`` seconds (see the module): an Outcome, never an exception.
    ``host`` is the Host header (``127.0.0.1:PORT``: servers guarding against DNS rebinding want it)."""
    deadline = time.monotonic() + timeout
    try:
        return _handshake(connect, path, token, deadline, host)
    except _Failed as exc:
        return Outcome(False, str(exc))


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Failed("no complete answer within the time allowed")
    return left


def _request(
    connect: Connect, host: str, deadline: float, method: str, path: str, headers: dict[str, str], body: bytes | None
) -> tuple[int, str, dict[str, str], bytes]:
    """(status, content type, headers lower-cased, body up to MAX_BODY) of one request on a fresh connection."""
    conn = _Connection(connect, host, _left(deadline))
    try:
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            kept = {k.lower(): v for k, v in response.getheaders()}
            ctype = kept.get("content-type", "").split(";")[0].strip().lower()
            data = response.read(MAX_BODY) if ctype != "text/event-stream" else _first_event(response)
            return response.status, ctype, kept, data
        except ConnectionRefusedError:
            raise _Failed("nothing listens there (connection refused)") from None
        except TimeoutError:
            raise _Failed("it accepted the connection but gave no HTTP answer in time (a bare listener?)") from None
        except http.client.HTTPException as exc:
            raise _Failed(f"it did not answer in HTTP ({type(exc).__name__})") from None
        except OSError as exc:
            raise _Failed(f"the connection failed: {exc.strerror or exc}") from None
    finally:
        conn.close()


def _first_event(response: http.client.HTTPResponse) -> bytes:
    """The data of the first SSE event carrying data (a stream may stay open after it)."""
    data: list[bytes] = []
    total = 0
    while total < MAX_BODY:
        line = response.readline(MAX_BODY)
        total += len(line)
        if not line:
            break
        text = line.rstrip(b"\r\n")
        if text.startswith(b"data:"):
            data.append(text[5:].removeprefix(b" "))
        elif not text and data:
            break
    return b"\n".join(data)


def _handshake(connect: Connect, path: str, token: str, deadline: float, host: str) -> Outcome:
    base = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "hermes-box-doctor", "version": "1"},
        },
    }
    status, ctype, headers, body = _request(connect, host, deadline, "POST", path, base, json.dumps(hello).encode())
    if status != 200:
        why = {401: " (the token was refused)", 403: " (the token was refused)", 404: f" (no MCP endpoint at {path})"}
        raise _Failed(f"initialize answered HTTP {status}{why.get(status, '')}")
    if ctype not in ("application/json", "text/event-stream"):
        raise _Failed(f"initialize answered {ctype or 'no content type'}, not JSON or an event stream")
    try:
        message = json.loads(body)
    except ValueError:
        raise _Failed(f"initialize's answer ({ctype}) is not JSON") from None
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or message.get("id") != 1:
        raise _Failed("initialize's answer is not the JSON-RPC response to the request")
    if "error" in message:
        error = message["error"] if isinstance(message["error"], dict) else {}
        raise _Failed(f"initialize failed: JSON-RPC error {error.get('code')} {str(error.get('message'))[:100]}")
    result = message.get("result")
    if not isinstance(result, dict):
        raise _Failed("initialize's answer has no result object")
    version = result.get("protocolVersion")
    if version not in KNOWN_VERSIONS:
        raise _Failed(f"initialize negotiated protocol version {str(version)[:40]!r}, which this probe does not speak")
    info = result.get("serverInfo")
    if not isinstance(result.get("capabilities"), dict) or not isinstance(info, dict) or not info.get("name"):
        raise _Failed("initialize's result lacks the server's capabilities or name")
    session = headers.get("mcp-session-id", "")
    if not session or not session.isascii() or not session.isprintable():
        raise _Failed("initialize's answer carries no Mcp-Session-Id")
    in_session = {**base, "Mcp-Session-Id": session, "MCP-Protocol-Version": str(version)}
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    status, _, _, _ = _request(connect, host, deadline, "POST", path, in_session, note)
    if not 200 <= status < 300:
        raise _Failed(f"notifications/initialized answered HTTP {status}")
    try:
        _request(connect, host, deadline, "DELETE", path, in_session, None)
    except _Failed:
        pass  # closing the session is best effort
    name = str(info.get("name"))[:60]
    return Outcome(
        True, f"initialize OK ({name}, protocol {version}, {ctype}, session issued), initialized sent", version
    )


def tcp(port: int, host: str = "127.0.0.1") -> Connect:
    """A ``Connect`` to ``host:port`` from this process's network namespace."""

    def connect(timeout: float) -> socket.socket:
        return socket.create_connection((host, port), timeout=timeout)

    return connect
