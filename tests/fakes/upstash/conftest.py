"""Fixtures of the Upstash fake's tests: one server per module, a fresh account (API key) per test."""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Iterator

import pytest

from fakes.keys import key_digest
from fakes.upstash import Settings, UpstashServer

from .helpers import Fake

os.environ.setdefault("UPSTASH_DISABLE_TELEMETRY", "1")  # the SDK's telemetry headers are noise here


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
