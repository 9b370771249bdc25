"""The protocol calls a cold start makes: each HTTP request and each WebSocket opened, in order.

``recorded()`` watches the two client libraries every vendor path here goes
through (httpx's synchronous transport, websockets' synchronous client) for
the length of one cold start, from any thread of this process: a backend's
own calls and those its SDK makes for it.  A call is named by its method and
path with ids folded (``POST /v1/sandboxes/{id}/exec``, ``WS /v2/box/{id}/exec-session``),
so a backend's calls and its minimal client's can be compared as multisets:
``beyond(backend, minimal)`` is what the backend does that the vendor's
fewest calls in the host do not.  Nothing is changed on the way: each call
goes on exactly as it would, and the watch ends with the block.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

_ID = re.compile(r"^(?=.*\d)[\w.-]{8,}$")  # a path segment holding an id: long, with a digit
_lock = threading.Lock()


def name(method: str, path: str) -> str:
    """``METHOD /path`` with each id segment as ``{id}``."""
    segments = ["{id}" if _ID.match(part) else part for part in path.split("?", 1)[0].split("/")]
    return f"{method} {'/'.join(segments)}"


@dataclass
class Recording:
    """The calls seen, each with the ``time.perf_counter()`` at which it was made."""

    seen: list[tuple[float, str]] = field(default_factory=list)

    def add(self, call: str) -> None:
        with _lock:
            self.seen.append((time.perf_counter(), call))

    def calls(self) -> list[str]:
        """Every call seen, in order."""
        return [call for _, call in self.seen]

    def before(self, moment: float) -> list[str]:
        """The calls made before ``moment`` (a cold start's result: its release is not part of it)."""
        return [call for at, call in self.seen if at <= moment]


@contextmanager
def recorded() -> Iterator[Recording]:
    """Every call made while inside, by name, in the order made."""
    import httpx
    from websockets.sync.client import ClientConnection

    seen = Recording()
    handle_request, handshake = httpx.HTTPTransport.handle_request, ClientConnection.handshake

    def watched_request(self: Any, request: httpx.Request) -> httpx.Response:
        seen.add(name(request.method, request.url.path))
        return handle_request(self, request)

    def watched_handshake(self: Any, *args: Any, **kwargs: Any) -> None:
        seen.add(name("WS", getattr(getattr(self.protocol, "uri", None), "path", None) or "?"))
        handshake(self, *args, **kwargs)

    httpx.HTTPTransport.handle_request = watched_request  # type: ignore[method-assign]
    ClientConnection.handshake = watched_handshake  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        httpx.HTTPTransport.handle_request = handle_request  # type: ignore[method-assign]
        ClientConnection.handshake = handshake  # type: ignore[method-assign]


def beyond(calls: list[str], baseline: list[str]) -> dict[str, int]:
    """The calls in ``calls`` beyond those in ``baseline``, counted (a multiset difference)."""
    return dict(collections.Counter(calls) - collections.Counter(baseline))
