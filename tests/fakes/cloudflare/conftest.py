"""Fixtures of the Cloudflare fake's tests: one bridge per module, a client, an initialised workspace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fakes.cloudflare import BridgeServer, CloudflareWorld

from .bridge_client import FAST, Client, new_id


@pytest.fixture(scope="module")
def server() -> Iterator[BridgeServer]:
    with BridgeServer(settings=FAST) as srv:
        yield srv


@pytest.fixture
def client(server: BridgeServer) -> Iterator[Client]:
    server.faults.clear()
    cli = Client(server)
    yield cli
    cli.close()
    server.faults.clear()


@pytest.fixture
def world(server: BridgeServer) -> CloudflareWorld:
    return CloudflareWorld(server.bridge)


@pytest.fixture
def sid(client: Client) -> str:
    """An initialised persistent workspace."""
    sandbox = new_id()
    assert client.init(sandbox).status_code == 200
    return sandbox
