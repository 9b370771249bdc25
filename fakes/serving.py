"""Serve an ASGI app with uvicorn on loopback, in a background thread.

Shared by every fake server: bind first (so port 0 gives a real port before
the thread starts), switch Nagle off on the listening socket (accepted sockets
inherit it; otherwise a response written in two parts waits ~40 ms on the
client's delayed ACK), start uvicorn on that socket and return once it
accepts connections.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from types import TracebackType
from typing import Any, Self

import uvicorn


class LoopbackServer:
    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, name: str = "fake", **uvicorn_options: Any):
        self.app = app
        self.host = host
        self.port = port
        self.name = name
        self._options = {
            "log_config": None,
            "log_level": "warning",
            "access_log": False,
            "lifespan": "off",
            "loop": "asyncio",
            "http": "h11",
            "timeout_graceful_shutdown": 2,
            **uvicorn_options,
        }
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("", "0.0.0.0") else self.host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def start(self, timeout: float = 15.0) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self.host, self.port))
        sock.listen(512)
        self.port = sock.getsockname()[1]
        self._server = server = uvicorn.Server(uvicorn.Config(self.app, **self._options))
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"{self.name}-{self.port}"
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise RuntimeError(f"the {self.name} fake did not start on {self.base_url}")
            time.sleep(0.01)

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self._server = self._thread = None


def quiet_uvicorn(hide: tuple[logging.Filter, ...]) -> None:
    """No request logs (headers carry credentials) and no tracebacks for scripted drops."""
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
    error_log = logging.getLogger("uvicorn.error")
    for one in hide:
        if one not in error_log.filters:
            error_log.addFilter(one)


class FakeServer:
    """What every fake vendor server shares: a LoopbackServer over a box world it may own.

    Subclasses set ``_loop``, ``world`` and ``_owns_world`` and say how their
    service ends (``_close_service``: end streams, kill box processes).
    """

    _loop: LoopbackServer
    world: Any
    _owns_world: bool
    log_filters: tuple[logging.Filter, ...] = ()

    @property
    def base_url(self) -> str:
        return self._loop.base_url

    @property
    def port(self) -> int:
        return self._loop.port

    @property
    def paths_note(self) -> str:
        return self.world.paths_note

    def _close_service(self) -> None:
        raise NotImplementedError

    def start(self, timeout: float = 15.0) -> Self:
        """Listen, and return once connections are accepted."""
        quiet_uvicorn(self.log_filters)
        self._loop.start(timeout)
        return self

    def stop(self) -> None:
        """Stop serving, end every stream, kill every box process; remove the world if it is ours."""
        self._close_service()
        self._loop.stop()
        if self._owns_world:  # a shared world keeps its other boxes; ours were destroyed above
            self.world.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
