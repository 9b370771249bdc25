"""Run the bridge on loopback: uvicorn on 127.0.0.1 in a background thread.

``BridgeServer`` also has the shape ``hermes-backend-kit fake serve`` expects of
a fake server class: ``(host=, port=, api_keys=)``, ``start()``, ``stop()``,
``exports()`` and ``paths_note``.
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from pathlib import Path
from types import TracebackType

import uvicorn

from fakes.faults import Faults
from fakes.world import PathLayout, World

from .delivery import HIDE_DROPS
from .router import create_app
from .settings import ENDPOINT_VAR, TOKEN_VAR, Settings
from .workspace import Bridge

# The container of the public repository: user hermes, HOME /home/hermes,
# WORKDIR /workspace (worker/container/Dockerfile).
LAYOUT = PathLayout(home="/home/hermes", workspace="/workspace", user="hermes")
_GENERATE = object()


class BridgeServer:
    """A bridge protocol v1 service with its own box world.

    ``token`` is the server secret (SANDBOX_API_TOKEN); by default a fresh
    64-character one (``api_keys[0]`` is another way to pass it).  Pass None,
    or change ``bridge.token`` later, to see ``not_configured``.  Timings
    default to the public Worker's; see ``Settings.quick()``.
    """

    def __init__(self, *, token: str | object | None = _GENERATE, settings: Settings | None = None,
                 world: World | None = None, root: Path | None = None, host: str = "127.0.0.1",
                 port: int = 0, namespaces: bool | None = None, api_keys: list[str] | None = None):
        if api_keys:
            token = api_keys[0]
        self.token: str | None = secrets.token_urlsafe(48) if token is _GENERATE else token  # type: ignore[assignment]
        self._owns_world = world is None
        self.world = world or World(root, layout=LAYOUT, namespaces=namespaces)
        self.faults = Faults()
        self.bridge = Bridge(self.world, settings or Settings(), self.token, self.faults)
        self.app = create_app(self.bridge)
        self._host, self._port = host, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def settings(self) -> Settings:
        return self.bridge.settings

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self._host in ("", "0.0.0.0") else self._host
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def paths_note(self) -> str:
        return self.world.paths_note

    def exports(self) -> dict[str, str]:
        """The plugin's variables for this server."""
        return {ENDPOINT_VAR: self.base_url, TOKEN_VAR: self.token or ""}

    def start(self, timeout: float = 15.0) -> BridgeServer:
        """Listen, and return once connections are accepted."""
        logging.getLogger("uvicorn.error").addFilter(HIDE_DROPS)
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit this: without it a response's body waits on the
        # client's delayed ACK of its headers (~40 ms per request).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self._host, self._port))
        sock.listen(128)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_config=None, log_level="warning", access_log=False,
                                lifespan="off", http="h11", ws="none", loop="asyncio",
                                timeout_graceful_shutdown=2, timeout_keep_alive=30)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        name=f"cf-bridge-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                sock.close()
                raise RuntimeError("the Cloudflare bridge fake did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving, end every stream, kill every box process."""
        self.bridge.close()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self._server = self._thread = None
        if self._owns_world:  # a shared world keeps its other boxes; ours were destroyed above
            self.world.close()

    def __enter__(self) -> BridgeServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
