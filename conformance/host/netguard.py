"""Block and record network connections while a provider call runs.

Used to prove that is_available(), probe() and plugin import stay offline.
Unix sockets stay allowed; every IP connection attempt is refused and logged.
"""

from __future__ import annotations

import _socket
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

_lock = threading.Lock()


class NetworkBlocked(ConnectionRefusedError):
    """Raised into the code under test when it tries to open a connection."""


@contextmanager
def network_guard() -> Iterator[list[str]]:
    """Yield a list that collects every attempted destination."""
    attempts: list[str] = []
    originals = (socket.socket.connect, socket.socket.connect_ex, socket.getaddrinfo, socket.create_connection)

    def refuse(target: object) -> NetworkBlocked:
        attempts.append(repr(target))
        return NetworkBlocked(f"network access blocked by hermes-backend-kit: {target!r}")

    # The replacements sit on _socket.socket, where connect/connect_ex live; the address is passed
    # through to the original unchanged, so it is typed as loosely as socket types it.
    def connect(self: _socket.socket, address: Any) -> None:
        if self.family == socket.AF_UNIX:
            return originals[0](self, address)
        raise refuse(address)

    def connect_ex(self: _socket.socket, address: Any) -> int:
        if self.family == socket.AF_UNIX:
            return originals[1](self, address)
        raise refuse(address)

    def getaddrinfo(host: object, port: object, *args: object, **kwargs: object) -> NoReturn:
        raise refuse((host, port))

    def create_connection(address: object, *args: object, **kwargs: object) -> NoReturn:
        raise refuse(address)

    with _lock:
        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo = getaddrinfo
        socket.create_connection = create_connection
        try:
            yield attempts
        finally:
            socket.socket.connect = originals[0]  # type: ignore[method-assign]
            socket.socket.connect_ex = originals[1]  # type: ignore[method-assign]
            socket.getaddrinfo = originals[2]
            socket.create_connection = originals[3]
