"""Helpers for tests that drive the real deepinfra SDK against the fake.

``Tenant`` is one API key on a running server (its own sandboxes and cap),
with an SDK client and a raw httpx client for checking wire details the SDK
hides (error bodies, NDJSON lines).  ``tenant(server)`` adds a fresh key,
restores the server's settings and faults afterwards, and terminates the
key's sandboxes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from fakes.keys import key_digest
from fakes.world import Box

from .server import DeepInfraServer
from .settings import DELETED, Settings


@dataclass
class Tenant:
    server: DeepInfraServer
    key: str
    _client: Any = field(default=None, repr=False)

    @property
    def client(self) -> Any:
        """A deepinfra.DeepInfraClient for this key (quick retries are the SDK's own)."""
        if self._client is None:
            from deepinfra import DeepInfraClient

            self._client = DeepInfraClient(api_key=self.key, base_url=self.server.base_url)
        return self._client

    @property
    def settings(self) -> Settings:
        return self.server.settings

    def create(self, **kwargs: Any) -> Any:
        from deepinfra import Sandbox

        return Sandbox.create(client=self.client, **kwargs)

    def box(self, sandbox_id: str) -> Box:
        box = self.server.world.get(sandbox_id, include_deleted=True)
        assert box is not None, f"no sandbox {sandbox_id} in the fake"
        return box

    def http(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A raw request with this key's bearer token."""
        headers = {"Authorization": f"Bearer {self.key}", **kwargs.pop("headers", {})}
        return httpx.request(method, self.server.base_url + path, headers=headers, timeout=30, **kwargs)

    def boxes(self) -> list[Box]:
        return self.server.world.boxes(owner=key_digest(self.key))


@contextlib.contextmanager
def tenant(server: DeepInfraServer) -> Iterator[Tenant]:
    key = "di_test_" + secrets.token_hex(8)
    server.service.add_key(key)
    saved = dataclasses.replace(server.settings)
    try:
        yield Tenant(server, key)
    finally:
        server.faults.clear()
        for f in dataclasses.fields(Settings):
            setattr(server.settings, f.name, getattr(saved, f.name))
        for box in server.world.boxes(owner=key_digest(key)):
            if box.state != DELETED:
                server.service.terminate(box)


def eventually(predicate: Callable[[], Any], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
