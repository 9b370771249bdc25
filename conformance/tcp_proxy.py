"""The TCP fault proxy of ``--client-faults tcp:HOST:PORT``: a loopback port forwarding every
connection to one endpoint, faulting the connection that carries a command.

The proxy reads nothing of the protocol (SSH, a vendor's wire protocol), so
it cannot see where a command starts.  Two things it can see stand in for
that:

- **which connection carries the command.**  A fault is taken by the first
  connection to show traffic after it is armed: a new connection when it
  opens, or a connection the backend keeps (an SSH ControlMaster, a pooled
  session) when the client next sends on it.  ``decide(reused)`` is asked
  at those moments and says which fault, if any, the connection meets.
- **when the command is running.**  A protocol talks before its command
  starts (an SSH key exchange and authentication are a few KiB, answered in
  milliseconds), so a fault counted from a connection's first byte lands in
  that talk.  ``drop`` and ``half-close`` instead act at the server's first
  pause of ``PAUSE_S`` once ``after_bytes`` of its bytes passed since the
  fault was taken (or at the end of its stream): a running command that
  waits, not a handshake.  A handshake with such a pause (a server slower
  than that to authenticate, a round trip longer than it) still meets the
  fault before the command: the checks tell that apart by the command's
  own record of its runs and leave the clause unverified.

What each kind does once taken:

- ``drop``: at that moment both connections are cut;
- ``half-close``: from that moment the server's bytes are read and
  discarded, both connections stay open and the client's bytes still reach
  the server;
- ``silence``: nothing passes either way (a new connection never reaches
  the server);
- ``latency``: the client's bytes wait ``delay_s`` (a new connection waits
  before connecting).

``release()`` ends what a fault holds (a stalled or half-closed connection is
cut, a fault waiting for its moment is forgotten): a held connection the
backend keeps would otherwise hold every later command of that backend.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable

from conformance.fault_proxy import CHUNK, CONNECT_TIMEOUT_S, FaultProxy
from fakes.faults import Fault

logger = logging.getLogger("conformance.tcp_proxy")

PAUSE_S = 0.4  # a server quiet this long, past the fault's bytes, is running a command that waits
KINDS = ("drop", "half-close", "silence", "latency")  # what can be done to bytes one cannot read

# The fault a connection meets when it opens (False) or when its client sends again (True: reused).
DecideConnection = Callable[[bool], Fault | None]

PASS, COUNTING, STALLED, DEAF = "pass", "counting", "stalled", "deaf"


class _Link:
    """One client connection, its server connection, and the fault it carries."""

    def __init__(self, client: socket.socket):
        self.client = client
        self.upstream: socket.socket | None = None
        self.lock = threading.Lock()
        self.fault: Fault | None = None
        self.state = PASS
        self.counted = 0  # the server's bytes since the fault was taken
        self.last_server = time.monotonic()
        self.carried = False  # bytes passed either way: the connection is in use, a command's next bytes reuse it
        self.wake_r, self.wake_w = socket.socketpair()

    def wake(self) -> None:
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass

    def take(self, fault: Fault) -> None:
        """The fault this link meets from now (``lock`` held); a delay is the caller's, and leaves the
        link free to meet another fault."""
        if fault.kind == "latency":
            return
        self.fault = fault
        self.counted = 0
        self.last_server = time.monotonic()  # a pause counts from here: the connection may have been idle
        self.state = STALLED if fault.kind == "silence" else COUNTING

    def close_wake(self) -> None:
        self.wake_r.close()
        self.wake_w.close()


class TcpFaultProxy(FaultProxy):
    """Forwards every connection on a loopback port to ``target``, faulting the one that carries a command."""

    def __init__(self, decide: DecideConnection, target: tuple[str, int]):
        super().__init__(lambda _path, _tls: None)
        self._decide_connection = decide
        self.target = target
        self._links: set[_Link] = set()

    def start(self) -> str:
        """Listen on an ephemeral loopback port; returns ``127.0.0.1:PORT``."""
        self.address = f"127.0.0.1:{self._listen()}"
        return self.address

    def release(self) -> None:
        """End what faults hold: stalled and half-closed connections are cut; pending faults are forgotten."""
        with self._lock:
            links = list(self._links)
        for link in links:
            with link.lock:
                held = link.state in (STALLED, DEAF)
                link.fault, link.state = None, PASS
            if held:
                self._cut(link)
            else:
                link.wake()

    def _fault_for(self, reused: bool) -> Fault | None:
        fault = self._decide_connection(reused)
        if fault is not None and fault.kind not in KINDS:
            logger.warning("a %s fault cannot be applied to a raw TCP connection; it passes unfaulted", fault.kind)
            return None
        return fault

    def _cut(self, link: _Link) -> None:
        self._close(link.client)
        if link.upstream is not None:
            self._close(link.upstream)

    # -- one connection -----------------------------------------------------------------------
    def _serve(self, client: socket.socket) -> None:
        link = _Link(client)
        with self._lock:
            self._links.add(link)
            self.tunnels += 1
        try:
            fault = self._fault_for(reused=False)
            if fault is not None:
                with link.lock:
                    link.take(fault)
            if fault is not None and fault.kind == "silence":
                self._hold(client)  # never reaches the server; release() or the client's leaving ends it
                return
            if fault is not None and fault.kind == "latency" and self._stopping.wait(fault.delay_s):
                return
            upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT_S)
            upstream.settimeout(None)
            self._track(upstream)
            link.upstream = upstream
            up = threading.Thread(target=self._up, args=(link,), daemon=True, name="kit-tcp-proxy-up")
            up.start()
            if self._down(link) != "drop":
                up.join()  # until the client leaves (or release() or stop() closes the sockets)
        except OSError as exc:
            logger.debug("tcp proxy connection ended: %s", exc)
        finally:
            self._cut(link)
            with self._lock:
                self._links.discard(link)
            link.close_wake()

    def _up(self, link: _Link) -> None:
        """Client -> server; client bytes on a connection already in use may take a fault."""
        assert link.upstream is not None
        try:
            while data := link.client.recv(CHUNK):
                with link.lock:
                    fault = self._fault_for(reused=link.carried) if link.fault is None else None
                    if fault is not None:
                        link.take(fault)
                    state, link.carried = link.state, True
                if fault is not None:
                    link.wake()
                    if fault.kind == "latency" and self._stopping.wait(fault.delay_s):
                        return
                if state == STALLED:
                    continue
                link.upstream.sendall(data)
            link.upstream.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _down(self, link: _Link) -> str | None:
        """Server -> client through the link's fault; returns ``"drop"`` when the fault cut the link."""
        upstream = link.upstream
        assert upstream is not None
        try:
            while True:
                timeout = self._until_moment(link)
                if timeout is not None and timeout <= 0:
                    if self._act(link):
                        return "drop"
                    continue
                ready, _, _ = select.select([upstream, link.wake_r], [], [], timeout)
                if link.wake_r in ready:
                    link.wake_r.recv(CHUNK)
                if upstream not in ready:
                    continue
                data = upstream.recv(CHUNK)
                if not data:
                    return self._server_ended(link)
                with link.lock:
                    link.last_server = time.monotonic()
                    state, link.carried = link.state, True
                    if state == COUNTING:
                        link.counted += len(data)
                if state in (STALLED, DEAF):
                    continue
                link.client.sendall(data)
        except (OSError, ValueError):  # ValueError: release() closed a socket select() was given
            return "drop"

    @staticmethod
    def _until_moment(link: _Link) -> float | None:
        """Seconds until the link's fault acts (its bytes passed, the server's pause long enough);
        None while it is not counting or its bytes have not passed."""
        with link.lock:
            if link.state != COUNTING or link.fault is None or link.counted < link.fault.after_bytes:
                return None
            return PAUSE_S - (time.monotonic() - link.last_server)

    def _act(self, link: _Link) -> bool:
        """The moment came: cut the link (True) or stop passing the server's bytes."""
        with link.lock:
            if link.state != COUNTING or link.fault is None:
                return False
            if link.fault.kind == "half-close":
                link.state = DEAF
                return False
            link.state = PASS
        return True

    def _server_ended(self, link: _Link) -> str | None:
        """The server closed its side: a fault still waiting acts now; otherwise the end passes on."""
        with link.lock:
            state, kind = link.state, link.fault.kind if link.fault is not None else None
            if state == COUNTING and kind == "half-close":
                link.state = state = DEAF
        if state == COUNTING and kind == "drop":
            return "drop"
        if state in (STALLED, DEAF):
            return None  # the client hears nothing more and its connection stays open
        try:
            link.client.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        return None
