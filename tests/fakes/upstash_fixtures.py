"""The Upstash fake's test fixtures: one server per module, a fresh account (API key) per test, helpers."""

from __future__ import annotations

import dataclasses
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from fakes.upstash import Settings, UpstashServer, key_digest
from fakes.world import World

os.environ.setdefault("UPSTASH_DISABLE_TELEMETRY", "1")  # the SDK's telemetry headers are noise here


@dataclass
class Fake:
    """The module's server seen through one API key (its own boxes, names and quota)."""

    server: UpstashServer
    key: str

    @property
    def kw(self) -> dict[str, Any]:
        return {"api_key": self.key, "base_url": self.server.base_url}

    @property
    def world(self) -> World:
        return self.server.world

    @property
    def settings(self) -> Settings:
        return self.server.settings

    @property
    def faults(self):  # type: ignore[no-untyped-def]
        return self.server.faults

    @property
    def url(self) -> str:
        return self.server.base_url

    @property
    def headers(self) -> dict[str, str]:
        return {"X-Box-Api-Key": self.key}

    def create(self, **config: Any):  # type: ignore[no-untyped-def]
        from upstash_box import Box

        return Box.create(**self.kw, **config)


@pytest.fixture(scope="module")
def upstash_server() -> Iterator[UpstashServer]:
    with UpstashServer() as server:
        yield server


@pytest.fixture
def fake(upstash_server: UpstashServer) -> Iterator[Fake]:
    key = "ubx_test_" + secrets.token_hex(8)
    upstash_server.service.add_key(key)
    world = upstash_server.world
    saved = dataclasses.replace(upstash_server.settings)
    delays = (world.create_delay_s, world.pause_delay_s, world.resume_delay_s)
    try:
        yield Fake(upstash_server, key)
    finally:
        upstash_server.faults.clear()
        for f in dataclasses.fields(Settings):
            setattr(upstash_server.settings, f.name, getattr(saved, f.name))
        world.create_delay_s, world.pause_delay_s, world.resume_delay_s = delays
        for box in world.boxes(owner=key_digest(key)):
            world.delete(box)


def alive(pid: int) -> bool:
    """Is ``pid`` a live process (not gone, not a zombie)?"""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def eventually(predicate: Any, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return bool(predicate())
