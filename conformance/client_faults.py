"""Transport faults injected in the backend's own clients, so any service can earn the transport clauses.

The transport-fault checks arm faults by role through ``kit.world.faults``
(fakes/fault_script.FaultScript).  A fake applies them in its server; this
module applies the same fault matrix on the client side, so the checks run
unchanged against a vendor's live service or against any fake:

- HTTP through httpx (most vendor SDKs): respx routes every request of the
  process through ``ClientFaults``.  A request no armed fault matches passes
  through to the real server untouched.  One that meets a fault is answered
  here (``status``), held (``latency``, ``silence``: bounded by the client's
  own read timeout, as a real server's silence would be), or sent to the
  server by a private client and its reply damaged on the way back
  (``drop``, ``half-close``, ``garbage``, ``truncate``; conformance/damage.py,
  the fakes' rules).  Sync and async clients alike.
- WebSocket connections of the ``websockets`` package (the Upstash exec
  session): ``ws_proxy`` / ``wss_proxy`` point them at a loopback CONNECT
  proxy (conformance/fault_proxy.py).  On plain ws:// it applies every kind;
  over TLS it can only drop, half-close, stall or delay a connection.
- Any other protocol over TCP (SSH, a vendor's own wire protocol):
  ``tcp:HOST:PORT`` starts a loopback TCP proxy in front of that endpoint
  (conformance/tcp_proxy.py) and exports its address
  (``HERMES_KIT_TCP_PROXY``), which the run's --backend-config hands to the
  backend; every connection through it is an ``exec`` connection, which it
  can drop, half-close, stall or delay where a command runs on it, whether
  the connection is new or one the backend keeps.

Which request is which role comes from a route table (conformance/fault_routes.py),
and faults are kept in the fakes' own registry (fakes.faults.Faults) keyed
by the table's routes, so ``arm``, ``Armed.fired``, ``clear`` and ``attempts``
behave exactly as a fake's script.

Two things a fake's script cannot get wrong are checked here.  A fault
armed on ``exec`` before this injector has seen any command call of the
backend (its commands go through a client it does not reach, or the table is
wrong) would never fire, and some checks would pass without a fault; so that
``arm`` skips the check as *unverified* instead.  The same holds for a kind
the proxy cannot apply because the backend's command channel is TLS.
``flood`` (a command's output made huge) is the service's behaviour, not the
transport's, and is refused.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpcore
import httpx
import pytest
import respx
from respx.mocks import HTTPCoreMocker

from conformance import fault_routes
from conformance.damage import UNIT_KINDS, Cutter, alines, lines
from conformance.fault_proxy import FaultProxy
from conformance.fault_routes import IGNORE, TCP_PROXY_HOST_VAR, TCP_PROXY_PORT_VAR, TCP_PROXY_VAR, Route, RouteTable
from conformance.tcp_proxy import PAUSE_S, TcpFaultProxy
from conformance.verdicts import UNVERIFIED_PREFIX
from fakes.fault_script import Armed, FaultScript
from fakes.faults import Fault, Faults

UNSUPPORTED = {
    "flood": (
        "a flood is a command's output made huge by the service; a client-side injector cannot make a "
        "command print more (faults.output-flood runs a real 256 MiB command instead)"
    ),
}
PLAINTEXT_KINDS = ("status", "garbage", "truncate")  # need to read the request or the frames
OBSERVED_FIRST = ("exec",)  # roles every check uses before arming them (a warm-up command)
POLL_S = 0.05
OPAQUE_CHANNELS = {"wss": "a TLS WebSocket", "tcp": "raw TCP connections"}  # the proxy cannot read their bytes
NEW_CONNECTION, REUSED_CONNECTION = "a new connection", "a connection the backend reused"

_INNER: contextvars.ContextVar[bool] = contextvars.ContextVar("kit_client_faults_inner", default=False)
_ASYNC: contextvars.ContextVar[bool] = contextvars.ContextVar("kit_client_faults_async", default=False)

_active_lock = threading.Lock()
_active: ClientFaults | None = None


class InjectorError(RuntimeError):
    """The client-side injector cannot start; the message says why and what to do."""


class _Registry(Faults):
    """The fakes' fault registry, with a take that skips faults a channel cannot apply."""

    def take_usable(self, route: str, box: str | None, usable: Callable[[Fault], bool]) -> Fault | None:
        with self._lock:
            for fault in self._armed:
                if fault.matches(route, box) and usable(fault):
                    fault.fired += 1
                    if fault.times >= 0 and fault.fired >= fault.times:
                        self._armed.remove(fault)
                    self.log.append((route, box, fault.kind))
                    self.fired_at.append((time.monotonic(), route))
                    return fault
        return None


class _PoolMocker(HTTPCoreMocker):
    """respx's httpcore mocker on the connection pools only (proxies are pools too): its default also
    patches each connection, so a request would meet the injector twice."""

    name = "hermes-backend-kit-pools"
    targets = ["httpcore._sync.connection_pool.ConnectionPool", "httpcore._async.connection_pool.AsyncConnectionPool"]


class _Router(respx.MockRouter):
    """respx's router, keeping no call history (a suite makes thousands of calls, some of them large) and
    telling the side effect whether the client is async."""

    def record(
        self, request: httpx.Request, *, response: httpx.Response | None = None, route: respx.Route | None = None
    ) -> None:
        return None

    async def aresolve(self, request: httpx.Request) -> Any:
        token = _ASYNC.set(True)
        try:
            return await super().aresolve(request)
        finally:
            _ASYNC.reset(token)


def _unverified(reason: str) -> None:
    pytest.skip(f"{UNVERIFIED_PREFIX} (harness: {reason})")


def _read_timeout(request: httpx.Request) -> float | None:
    timeout = request.extensions.get("timeout") or {}
    value = timeout.get("read") if isinstance(timeout, dict) else None
    return float(value) if isinstance(value, int | float) else None


class ClientFaults(FaultScript):
    """A FaultScript whose faults are injected in this process's HTTP and WebSocket clients."""

    def __init__(self, table: RouteTable):
        self.registry = _Registry()
        super().__init__(self.registry, table.role_routes())
        self.table = table
        self.seen: dict[str, Counter[str]] = {role: Counter() for role in self.routes}  # role -> channel -> n
        self._seen_lock = threading.Lock()
        self._stopping = threading.Event()
        self._router: _Router | None = None
        self.proxy: FaultProxy | None = None
        self.tcp_proxy: TcpFaultProxy | None = None
        self._landed: dict[int, str] = {}  # id(fault) -> the TCP connection it met (NEW_CONNECTION, ...)

    # -- the FaultScript interface ------------------------------------------------------------
    def arm(self, kind: str, role: str, *, sandbox: str | None = None, times: int = 1, **params: object) -> Armed:
        if kind in UNSUPPORTED:
            raise ValueError(f"client-side faults cannot inject {kind!r}: {UNSUPPORTED[kind]}")
        if role in self.routes:
            self._require_observable(kind, role)
        return super().arm(kind, role, sandbox=sandbox, times=times, **params)

    def clear(self) -> None:
        """Disarm everything armed here; the TCP proxy lets go of what its faults hold (a stalled or
        half-closed connection the backend keeps would hold every later command)."""
        super().clear()
        if self.tcp_proxy is not None:
            self.tcp_proxy.release()

    def landed(self, armed: Armed) -> str | None:
        """The TCP connection an armed fault met (a new one, or one the backend reused); None when it
        fired elsewhere or not at all."""
        return next((self._landed[id(f)] for f in armed.faults if id(f) in self._landed), None)

    def why_unfired(self, armed: Armed) -> str:
        if self.table.tcp_target is None or armed.role not in OBSERVED_FIRST:
            return super().why_unfired(armed)
        return (
            f"no new connection reached the kit's TCP proxy in front of {self.table.name} and no open one "
            "carried the backend's bytes after the fault was armed: the command went another way"
        )

    def before_command(self, armed: Armed) -> str | None:
        landed = self.landed(armed)
        if landed is None:
            return None
        return (
            f"the kit's TCP proxy cannot see where a command starts on {landed}: it applies the fault at the "
            f"server's first pause of {PAUSE_S:g}s, and this connection paused before the command started "
            "(a handshake or authentication slower than that, or a round trip longer than it)"
        )

    def _require_observable(self, kind: str, role: str) -> None:
        with self._seen_lock:
            channels = +self.seen[role]
        tcp = self.table.tcp_target
        if kind in PLAINTEXT_KINDS and not self.routes[role]:
            _unverified(
                f"the run's client-side faults reach only the backend's TCP connections to the endpoint of "
                f"{self.table.name}, which carry its commands; a {kind} fault on {role} needs an HTTP route "
                "the injector can answer in the service's place"
            )
        if role in OBSERVED_FIRST and not channels and tcp is not None:
            _unverified(
                f"no connection of this backend reached the kit's TCP proxy in front of {self.table.name}, "
                f"so a {kind} fault on {role} would never fire: point the backend at the proxy through "
                f"${TCP_PROXY_VAR} (or ${TCP_PROXY_HOST_VAR} and ${TCP_PROXY_PORT_VAR}) in --backend-config "
                "(docs/transport-faults.md)"
            )
        if role in OBSERVED_FIRST and not channels:
            _unverified(
                f"no {role} request of this backend reached the client-side fault injector (routes: "
                f"{self.table.describe(role)}; the table is {self.table.name}), so a {kind} fault on "
                f"{role} would never fire: the backend's client is neither httpx nor a websockets "
                "connection, or the route table does not match it"
            )
        if kind in PLAINTEXT_KINDS and channels and set(channels) <= set(OPAQUE_CHANNELS):
            over = " and ".join(OPAQUE_CHANNELS[c] for c in sorted(channels))
            _unverified(
                f"the backend's {role} calls go over {over}, whose bytes the fault proxy cannot read: it can "
                f"drop, half-close, stall or delay a connection but cannot inject {kind}"
            )

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, set_env: Callable[[str, str], None]) -> None:
        """Route this process's httpx traffic through the injector, its WebSocket clients through the
        fault proxy (``set_env`` exports ws_proxy / wss_proxy) and, for tcp:HOST:PORT, start the TCP
        proxy in front of that endpoint (``set_env`` exports its address).  One injector per process."""
        global _active
        with _active_lock:
            if _active is not None:
                raise InjectorError(
                    "a client-side fault injector is already active in this process; stop it "
                    "first (one run per process injects client-side faults)"
                )
            _active = self
        try:
            if any(r.method not in ("WS", "TCP") for r in self.table.routes):
                router = _Router(assert_all_called=False, assert_all_mocked=False, using=_PoolMocker.name)
                router.route().mock(side_effect=self._on_request)
                router.start()
                self._router = router
            if any(r.method == "WS" for r in self.table.routes):
                self.proxy = FaultProxy(self._decide_tunnel)
                address = self.proxy.start()
                set_env("ws_proxy", address)
                set_env("wss_proxy", address)
            if self.table.tcp_target is not None:
                self.tcp_proxy = TcpFaultProxy(self._decide_connection, self.table.tcp_target)
                address = self.tcp_proxy.start()
                host, _, port = address.rpartition(":")
                set_env(TCP_PROXY_VAR, address)
                set_env(TCP_PROXY_HOST_VAR, host)
                set_env(TCP_PROXY_PORT_VAR, port)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop injecting: unpatch httpx, stop the proxy, release every held request."""
        global _active
        self._stopping.set()
        if self._router is not None:
            self._router.stop(quiet=True)
            self._router = None
        for proxy in (self.proxy, self.tcp_proxy):
            if proxy is not None:
                proxy.stop()
        self.proxy = self.tcp_proxy = None
        with _active_lock:
            if _active is self:
                _active = None

    # -- what the injector sees ---------------------------------------------------------------
    def _observe(self, role: str, channel: str) -> None:
        with self._seen_lock:
            self.seen[role][channel] += 1

    def _decide_tunnel(self, path: str | None, tls: bool) -> Fault | None:
        """The fault a WebSocket tunnel meets (the proxy's question)."""
        matches: list[tuple[Route, str | None]]
        if tls:
            matches = [(route, None) for route in self.table.opaque_websocket()]
        else:
            found = self.table.classify("WS", path or "")
            matches = [(found.route, found.sandbox)] if found is not None and found.route.role != IGNORE else []
        return self._take(matches, "wss" if tls else "ws")

    def _decide_connection(self, reused: bool) -> Fault | None:
        """The fault a TCP connection to the tcp:HOST:PORT endpoint meets as it opens, or as its client
        sends again on it (``reused``): the TCP proxy's question."""
        fault = self._take([(route, None) for route in self.table.routes if route.method == "TCP"], "tcp")
        if fault is not None:
            self._landed[id(fault)] = REUSED_CONNECTION if reused else NEW_CONNECTION
        return fault

    def _take(self, matches: list[tuple[Route, str | None]], channel: str) -> Fault | None:
        """The first armed fault of the matching routes the channel can apply, noting what was seen."""
        if not matches:
            return None
        self._observe(matches[0][0].role, channel)
        opaque = channel in OPAQUE_CHANNELS

        def usable(fault: Fault) -> bool:
            return not (opaque and fault.kind in PLAINTEXT_KINDS)

        for route, sandbox in matches:
            fault = self.registry.take_usable(route.text, sandbox, usable)
            if fault is not None:
                return fault
        return None

    def _on_request(self, request: httpx.Request) -> Any:
        """respx's side effect for every httpx request of the process: the request itself passes through."""
        if _INNER.get() or self._stopping.is_set():
            return request
        found = self.table.classify(request.method, request.url.path)
        if found is None or found.route.role == IGNORE:
            return request
        self._observe(found.route.role, "http")
        fault = self.registry.take(found.route.text, found.sandbox)
        if fault is None:
            return request
        if _ASYNC.get():
            return self._afault(request, fault)
        return self._fault(request, fault)

    # -- sync clients -------------------------------------------------------------------------
    def _hold(self, seconds: float | None) -> bool:
        """Wait ``seconds`` (None: until stopped); True when the injector stopped meanwhile."""
        return self._stopping.wait(seconds)

    def _fault(self, request: httpx.Request, fault: Fault) -> Any:
        read = _read_timeout(request)
        if fault.kind == "status":
            return _status_response(fault)
        if fault.kind == "latency":
            if read is not None and fault.delay_s > read:
                self._hold(read)
                raise httpcore.ReadTimeout("timed out (the kit's fault injector delayed the reply past it)")
            self._hold(fault.delay_s)
            return request
        if fault.kind == "silence":
            if self._hold(read):
                raise httpcore.ReadError("the kit's fault injector stopped while the service was silent")
            raise httpcore.ReadTimeout("timed out (the kit's fault injector kept the service silent)")
        client = httpx.Client(timeout=None)  # the request carries the backend's own timeouts
        token = _INNER.set(True)
        try:
            upstream = client.send(_forwarded(request, fault), stream=True)
        except BaseException:
            client.close()
            raise
        finally:
            _INNER.reset(token)
        body = _DamagedBody(upstream, client.close, fault, read, self._stopping)
        return _damaged_response(upstream, fault, body)

    # -- async clients ------------------------------------------------------------------------
    async def _ahold(self, seconds: float | None) -> bool:
        deadline = None if seconds is None else time.monotonic() + seconds
        while not self._stopping.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic())))
        return True

    async def _afault(self, request: httpx.Request, fault: Fault) -> Any:
        read = _read_timeout(request)
        if fault.kind == "status":
            return _status_response(fault)
        if fault.kind == "latency":
            if read is not None and fault.delay_s > read:
                await self._ahold(read)
                raise httpcore.ReadTimeout("timed out (the kit's fault injector delayed the reply past it)")
            await self._ahold(fault.delay_s)
            return request
        if fault.kind == "silence":
            if await self._ahold(read):
                raise httpcore.ReadError("the kit's fault injector stopped while the service was silent")
            raise httpcore.ReadTimeout("timed out (the kit's fault injector kept the service silent)")
        client = httpx.AsyncClient(timeout=None)
        token = _INNER.set(True)
        try:
            upstream = await client.send(_forwarded(request, fault), stream=True)
        except BaseException:
            await client.aclose()
            raise
        finally:
            _INNER.reset(token)
        body = _AsyncDamagedBody(upstream, client.aclose, fault, read, self._stopping)
        return _damaged_response(upstream, fault, body)


def _status_response(fault: Fault) -> httpx.Response:
    return httpx.Response(fault.status, json={"error": fault.message})


def _forwarded(request: httpx.Request, fault: Fault) -> httpx.Request:
    """The request as the server gets it; a unit-damaging fault asks for an unencoded body, whose lines
    it can see."""
    if fault.kind not in UNIT_KINDS:
        return request
    headers = httpx.Headers(request.headers)
    headers["accept-encoding"] = "identity"
    return httpx.Request(
        request.method, request.url, headers=headers, content=request.content, extensions=request.extensions
    )


def _damaged_response(upstream: httpx.Response, fault: Fault, body: Any) -> httpx.Response:
    headers = [(k, v) for k, v in upstream.headers.raw if k.lower() != b"content-length"]  # the body changes
    extensions = {"http_version": upstream.http_version.encode(), "reason_phrase": upstream.reason_phrase.encode()}
    return httpx.Response(upstream.status_code, headers=headers, stream=body, extensions=extensions)


def _drop_error() -> Exception:
    return httpcore.RemoteProtocolError(
        "peer closed connection without sending complete message body (the kit's fault injector cut it)"
    )


class _DamagedBody(httpx.SyncByteStream):
    """The server's reply body, damaged by one fault on its way to a sync client."""

    def __init__(
        self,
        upstream: httpx.Response,
        close_client: Callable[[], None],
        fault: Fault,
        read_timeout: float | None,
        stopping: threading.Event,
    ):
        self.upstream = upstream
        self.close_client = close_client
        self.fault = fault
        self.read_timeout = read_timeout
        self.stopping = stopping
        self.closed = threading.Event()
        self.cutter = Cutter(fault.kind, fault.after_bytes, fault.payload.encode("utf-8", "replace") + b"\n")

    def _units(self) -> Iterator[bytes]:
        raw = self.upstream.iter_raw()
        return lines(raw) if self.fault.kind in UNIT_KINDS else raw

    def __iter__(self) -> Iterator[bytes]:
        for unit in self._units():
            pieces, action = self.cutter.feed(unit)
            yield from (p for p in pieces if p)
            if action is not None:
                self._act(action)
        pieces, action = self.cutter.end()
        yield from (p for p in pieces if p)
        if action is not None:
            self._act(action)

    def _act(self, action: str) -> None:
        if action == "drop":
            self.close()
            raise _drop_error()
        deadline = None if self.read_timeout is None else time.monotonic() + self.read_timeout
        while not (self.closed.is_set() or self.stopping.is_set()):
            if deadline is not None and time.monotonic() >= deadline:
                raise httpcore.ReadTimeout("timed out (the kit's fault injector stopped the reply, connection open)")
            self.closed.wait(POLL_S)
        raise httpcore.ReadError("the connection was closed while the reply was stopped")

    def close(self) -> None:
        self.closed.set()
        try:
            self.upstream.close()
        finally:
            self.close_client()


class _AsyncDamagedBody(httpx.AsyncByteStream):
    """The server's reply body, damaged by one fault on its way to an async client."""

    def __init__(
        self,
        upstream: httpx.Response,
        close_client: Callable[[], Any],
        fault: Fault,
        read_timeout: float | None,
        stopping: threading.Event,
    ):
        self.upstream = upstream
        self.close_client = close_client
        self.fault = fault
        self.read_timeout = read_timeout
        self.stopping = stopping
        self.closed = False
        self.cutter = Cutter(fault.kind, fault.after_bytes, fault.payload.encode("utf-8", "replace") + b"\n")

    def _units(self) -> AsyncIterator[bytes]:
        raw = self.upstream.aiter_raw()
        return alines(raw) if self.fault.kind in UNIT_KINDS else raw

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for unit in self._units():
            pieces, action = self.cutter.feed(unit)
            for piece in pieces:
                if piece:
                    yield piece
            if action is not None:
                await self._act(action)
        pieces, action = self.cutter.end()
        for piece in pieces:
            if piece:
                yield piece
        if action is not None:
            await self._act(action)

    async def _act(self, action: str) -> None:
        if action == "drop":
            await self.aclose()
            raise _drop_error()
        deadline = None if self.read_timeout is None else time.monotonic() + self.read_timeout
        while not (self.closed or self.stopping.is_set()):
            if deadline is not None and time.monotonic() >= deadline:
                raise httpcore.ReadTimeout("timed out (the kit's fault injector stopped the reply, connection open)")
            await asyncio.sleep(POLL_S)
        raise httpcore.ReadError("the connection was closed while the reply was stopped")

    async def aclose(self) -> None:
        self.closed = True
        try:
            await self.upstream.aclose()
        finally:
            await self.close_client()


class FaultWorld:
    """The run's world view with client-side faults: ``faults`` is the injector; everything else is the
    fake's world when the run has one (a run without one can locate nothing)."""

    def __init__(self, world: Any, faults: ClientFaults):
        self._world = world
        self.faults = faults
        base = set(getattr(world, "capabilities", ()) or ()) if world is not None else set()
        self.capabilities = frozenset(base | {"transport-faults"})

    def locate(self, relpath: str, content: str) -> str | None:
        return None if self._world is None else self._world.locate(relpath, content)

    def sandboxes(self) -> dict[str, str]:
        """The fake's sandboxes; none without a fake (as a run without any world view sees)."""
        return {} if self._world is None else self._world.sandboxes()

    def find_record(self, name: str, near: str | None = None) -> dict[str, str]:
        """A check's record file in the fake's sandboxes; none without a fake (the checks then read it
        through the backend, as a run without any world view does)."""
        return {} if self._world is None else dict(self._world.find_record(name, near))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or self._world is None:
            raise AttributeError(f"this run has no world view ({name}); only client-side transport faults")
        return getattr(self._world, name)


def table_for_run(setting: str | None, *, vendor: str | None, world: Any) -> RouteTable | None:
    """The route table when this run injects transport faults client-side, else None.

    ``setting`` is --client-faults: ``off``; ``on`` (the run's vendor table); a
    vendor; a route table file; or None, automatic: client-side when the run
    has no fake whose world scripts transport faults (a live run, or a fake
    without a fault script) and the kit knows the backend's vendor.
    ``vendor``: the run's fake, or the vendor of a backend the kit knows by name.
    """
    if setting == "off":
        return None
    if setting is None:
        if world is not None and "transport-faults" in set(getattr(world, "capabilities", ()) or ()):
            return None
        return fault_routes.vendor(vendor) if vendor in fault_routes.VENDOR_ROUTES else None
    return fault_routes.resolve(setting, vendor_hint=vendor)


def start_before_config(setting: str | None, *, set_env: Callable[[str, str], None]) -> ClientFaults | None:
    """For tcp:HOST:PORT, start the TCP proxy before the run reads --backend-config, whose env values may
    name its address (``${HERMES_KIT_TCP_PROXY}``); None for every other setting."""
    if setting is None or not setting.startswith(fault_routes.TCP_PREFIX):
        return None
    faults = ClientFaults(fault_routes.tcp(setting))
    faults.start(set_env)
    return faults


def start_for_run(
    setting: str | None,
    *,
    vendor: str | None,
    world: Any,
    set_env: Callable[[str, str], None],
    started: ClientFaults | None = None,
) -> FaultWorld | None:
    """Start client-side injection when the run uses it (``started``: the injector start_before_config
    started); the world view the checks then see."""
    if started is not None:
        return FaultWorld(world, started)
    table = table_for_run(setting, vendor=vendor, world=world)
    if table is None:
        return None
    faults = ClientFaults(table)
    faults.start(set_env)
    return FaultWorld(world, faults)
