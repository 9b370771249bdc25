"""Cut the connection a thread is blocked on, from another thread, even before the response has begun.

A killed command must let go of its connection: Hermes has answered already,
and a thread blocked in a read holds a worker, a pooled connection and,
where the client queues commands, the sandbox's place.  Once a response has
begun, its stream names the socket to shut down; a request still waiting for
the response's first byte (a service that accepted it and stays silent) has
no response object yet.  This network backend for httpcore remembers which
socket each thread last read or wrote, so that ``cut(thread)`` can shut it
down: a blocked ``recv`` returns at once (closing the socket alone would not
wake it), and httpx raises a transport error in the blocked thread.

A socket goes back to the pool when its request ends and may then serve
another thread; ``cut`` acts only on a socket whose latest user is the
thread named, so it never cuts another thread's request, and a thread calls
``forget`` when its request is over, so that a socket idle in the pool is
never cut.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

import httpcore
import httpx


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, owner: ThreadSockets) -> None:
        self._inner = inner
        self._owner = owner

    def _used(self) -> None:
        sock = self._inner.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            self._owner.used(sock)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self._used()
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._used()
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        sock = self._inner.get_extra_info("socket")
        self._inner.close()
        if isinstance(sock, socket.socket):
            self._owner.closed(sock)

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._owner)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class ThreadSockets(httpcore.NetworkBackend):
    """httpcore's network backend, remembering the socket each thread used last (module docstring)."""

    def __init__(self, inner: httpcore.NetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.SyncBackend()
        self._lock = threading.Lock()
        self._by_thread: dict[int, socket.socket] = {}
        self._user: dict[int, int] = {}  # id(socket) -> the thread that used it last

    @classmethod
    def install(cls, client: httpx.Client) -> ThreadSockets | None:
        """Put one ThreadSockets under every connection pool of ``client`` (its transport, and a proxy's
        where the environment names one); None where httpx offers no such seam."""
        transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
        pools: list[Any] = [getattr(transport, "_pool", None) for transport in transports if transport is not None]
        seams = [pool for pool in pools if isinstance(getattr(pool, "_network_backend", None), httpcore.NetworkBackend)]
        if not seams:
            return None
        backend = cls(seams[0]._network_backend)
        for pool in seams:
            pool._network_backend = backend
        return backend

    # -- the thread's side -------------------------------------------------------------
    def used(self, sock: socket.socket) -> None:
        ident = threading.get_ident()
        with self._lock:
            self._by_thread[ident] = sock
            self._user[id(sock)] = ident

    def closed(self, sock: socket.socket) -> None:
        with self._lock:
            ident = self._user.pop(id(sock), None)
            if ident is not None and self._by_thread.get(ident) is sock:
                del self._by_thread[ident]

    def forget(self) -> None:
        """This thread's requests so far are over: a later ``cut`` of it cuts nothing until it reads or writes."""
        with self._lock:
            self._by_thread.pop(threading.get_ident(), None)

    # -- another thread's side ------------------------------------------------------------
    def cut(self, thread: int) -> bool:
        """Shut down the socket ``thread`` is using, if it is still that thread's; True when one was cut."""
        with self._lock:
            sock = self._by_thread.get(thread)
            if sock is None or self._user.get(id(sock)) != thread:
                return False
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            return False
        return True

    # -- httpcore's NetworkBackend ----------------------------------------------------------
    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options), self)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(path, timeout, socket_options), self)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)
