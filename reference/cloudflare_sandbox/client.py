"""HTTP to the bridge Worker: protocol v1 calls, the exec stream, and extension negotiation.

Every request carries the bearer token, ``Accept: application/json`` and a
named User-Agent (Cloudflare's bot protection refuses generic client names),
plus the Access service-token headers when configured.  Redirects are never
followed: a redirect would carry the token to another origin.  Nothing is
retried here; callers decide, knowing whether a command could have run.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from reference.common.cuttable import ThreadSockets

from .errors import BridgeError, error_from_response
from .settings import Settings

USER_AGENT = "hermes-backend-kit-cloudflare-sandbox/0.1.0"
PROTOCOL = 1
EXT_CONCURRENT_EXEC = "concurrent-exec"
EXT_LARGE_OUTPUT = "large-output"
V1_OUTPUT_LIMIT = 2_000_000  # UTF-16 code units
MAX_BODY_BYTES = 1_048_576
CONNECT_TIMEOUT_S = 15.0
CALL_TIMEOUT_S = 90.0  # release and checkpoint take a snapshot
CANCEL_TIMEOUT_S = 5.0
MAX_ERROR_BODY = 65_536
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class Features:
    """What /health offers: the protocol version and the extensions this client uses."""

    protocol: int = PROTOCOL
    concurrent_exec: bool = False
    max_concurrent: int = 1
    large_output: bool = False
    max_output: int = V1_OUTPUT_LIMIT

    @classmethod
    def from_health(cls, data: Any) -> Features:
        if not isinstance(data, dict) or data.get("ok") is not True or data.get("protocol") != PROTOCOL:
            raise BridgeError("unexpected_response", detail="/health did not report bridge protocol 1")
        extensions, declared = data.get("extensions"), data.get("limits")
        offered: list[Any] = extensions if isinstance(extensions, list) else []
        limits: dict[str, Any] = declared if isinstance(declared, dict) else {}

        def limit(name: str, default: int) -> int:
            value = limits.get(name)
            return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

        concurrent = EXT_CONCURRENT_EXEC in offered
        large = EXT_LARGE_OUTPUT in offered
        return cls(
            protocol=PROTOCOL,
            concurrent_exec=concurrent,
            max_concurrent=limit("concurrent_execs", 4) if concurrent else 1,
            large_output=large,
            max_output=max(limit("max_output", V1_OUTPUT_LIMIT), V1_OUTPUT_LIMIT) if large else V1_OUTPUT_LIMIT,
        )

    @property
    def names(self) -> list[str]:
        return [
            n for n, on in ((EXT_CONCURRENT_EXEC, self.concurrent_exec), (EXT_LARGE_OUTPUT, self.large_output)) if on
        ]


def encode(body: dict[str, Any]) -> bytes:
    """The JSON body exactly as sent (its size is checked against the 1 MiB limit)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


class ExecStream:
    """An open exec response: raw body chunks, and a way to cut the connection from another thread."""

    def __init__(self, response: httpx.Response):
        self._response = response

    def chunks(self) -> Iterator[bytes]:
        return self._response.iter_raw()

    def abort(self) -> None:
        """Shut the socket down so a blocked read returns at once (closing alone does not wake it)."""
        stream = self._response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@functools.lru_cache(maxsize=1)
def tls_context() -> ssl.SSLContext:
    """Verified TLS without ssl.create_default_context(), which would honour SSLKEYLOGFILE and
    write this connection's keys (enough to read the bearer token) to a file."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the certificate and the host name
    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cafile or capath:
        ctx.load_verify_locations(cafile=cafile or None, capath=capath or None)
    else:
        import certifi

        ctx.load_verify_locations(cafile=certifi.where())
    return ctx


class BridgeClient:
    def __init__(self, settings: Settings):
        headers = {"Authorization": f"Bearer {settings.token}", "Accept": "application/json", "User-Agent": USER_AGENT}
        if settings.access is not None:
            headers["CF-Access-Client-Id"], headers["CF-Access-Client-Secret"] = settings.access
        self._http = httpx.Client(
            base_url=settings.endpoint,
            headers=headers,
            follow_redirects=False,
            verify=tls_context(),
            timeout=httpx.Timeout(CALL_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            # Short keep-alive: a pooled connection the server already closed would make a
            # request's outcome unknown, and exec requests are never retried.
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16, keepalive_expiry=5.0),
        )
        self._sockets = ThreadSockets.install(self._http)  # a killed command's request can be cut (cut())

    def close(self) -> None:
        self._http.close()

    def cut(self, thread: int) -> bool:
        """Shut down the connection ``thread`` is blocked on, even before its response began."""
        return self._sockets is not None and self._sockets.cut(thread)

    def forget(self) -> None:
        """This thread's requests are over: ``cut`` of it cuts nothing until its next request."""
        if self._sockets is not None:
            self._sockets.forget()

    # -- JSON calls ---------------------------------------------------------------------
    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, timeout: float = CALL_TIMEOUT_S
    ) -> Any:
        content = encode(body) if body is not None else None
        headers = {"Content-Type": "application/json"} if content is not None else None
        try:
            with self._http.stream(
                method,
                path,
                content=content,
                headers=headers,
                timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT_S)),
            ) as resp:
                data = _read_limited(resp)
        except httpx.TransportError as exc:
            raise transport_error(exc) from None
        if 300 <= resp.status_code < 400:
            raise BridgeError("redirect_refused", status=resp.status_code)
        if resp.status_code != 200:
            raise error_from_response(resp.status_code, data)
        try:
            return json.loads(data)
        except ValueError:
            raise BridgeError("unexpected_response", status=200, detail="the answer is not JSON") from None

    def health(self, *, timeout: float = 30.0) -> Features:
        return Features.from_health(self.call("GET", "/health", timeout=timeout))

    def init(self, sid: str, config: dict[str, Any]) -> Any:
        return self.call("POST", f"/v1/sandboxes/{sid}", config)

    def release(self, sid: str, *, timeout: float = CALL_TIMEOUT_S) -> None:
        self.call("POST", f"/v1/sandboxes/{sid}/release", {}, timeout=timeout)

    def delete(self, sid: str, *, timeout: float = CALL_TIMEOUT_S) -> None:
        self.call("DELETE", f"/v1/sandboxes/{sid}", {"confirm": True}, timeout=timeout)

    def cancel(self, sid: str, request_id: str) -> None:
        self.call("POST", f"/v1/sandboxes/{sid}/cancel/{request_id}", {}, timeout=CANCEL_TIMEOUT_S)

    # -- the exec stream ----------------------------------------------------------------
    @contextmanager
    def exec_stream(self, sid: str, body: bytes, *, read_timeout: float) -> Iterator[ExecStream]:
        """POST .../exec; yields the NDJSON stream, or raises BridgeError saying whether the command ran."""
        timeout = httpx.Timeout(CALL_TIMEOUT_S, connect=CONNECT_TIMEOUT_S, read=read_timeout)
        try:
            with self._http.stream(
                "POST",
                f"/v1/sandboxes/{sid}/exec",
                content=body,
                timeout=timeout,
                headers={"Content-Type": "application/json"},
            ) as resp:
                if resp.status_code != 200:
                    data = _read_limited(resp)
                    if 300 <= resp.status_code < 400:
                        raise BridgeError("redirect_refused", status=resp.status_code)
                    raise error_from_response(resp.status_code, data)
                kind = resp.headers.get("content-type", "").split(";")[0].strip().lower()
                if kind != NDJSON:
                    raise BridgeError(
                        "protocol_error",
                        status=200,
                        detail=f"the answer is {kind or 'untyped'}, not {NDJSON}",
                        ran="unknown",
                    )
                yield ExecStream(resp)
        except httpx.TransportError as exc:
            raise transport_error(exc) from None


def _read_limited(resp: httpx.Response) -> bytes:
    data = bytearray()
    for chunk in resp.iter_raw():
        data += chunk
        if len(data) > MAX_ERROR_BODY:
            break
    return bytes(data)


def transport_error(exc: httpx.TransportError) -> BridgeError:
    """A network failure; only a failed connect proves the request was never sent."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return BridgeError("connection_error", detail=f"could not connect ({type(exc).__name__})", ran="no")
    return BridgeError("connection_error", detail=f"the connection failed ({type(exc).__name__})", ran="unknown")
