"""Fixtures shared by the DeepInfra fake's tests: one server per module, a fresh account per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.deepinfra import DeepInfraServer, Settings
from fakes.deepinfra.testing import Tenant, tenant


@pytest.fixture(scope="module")
def server() -> Iterator[DeepInfraServer]:
    # Instant transitions (the SDK polls with a 0.5 s backoff); tests of the states slow them down.
    with DeepInfraServer(settings=Settings(create_delay_s=0, boot_delay_s=0, stop_delay_s=0)) as srv:
        yield srv


@pytest.fixture
def fake(server: DeepInfraServer) -> Iterator[Tenant]:
    with tenant(server) as t:
        yield t


@pytest.fixture
def sandbox(fake: Tenant):  # type: ignore[no-untyped-def]
    return fake.create()
