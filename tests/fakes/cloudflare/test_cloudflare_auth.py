"""Bridge auth: bearer tokens compared as fixed-length digests, a missing or weak server secret,
nothing touched before auth."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx
import pytest

from fakes.cloudflare import BridgeServer
from fakes.cloudflare import protocol as cf_protocol

from .bridge_client import (
    Client,
    error_of,
    new_id,
)


def test_health_reports_protocol_version_without_starting_compute(client: Client, server: BridgeServer) -> None:
    before = len(server.world.boxes())
    resp = client.http.get("/health")
    assert resp.status_code == 200
    assert resp.json() == {"ok": True, "protocol": 1}
    assert resp.headers["cache-control"] == "no-store"
    assert len(server.world.boxes()) == before


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer wrong-token",
        "bearer {token}",
        "Bearer  {token}",
        "Basic {token}",
        "{token}",
        "Bearer {token}x",
        "Bearer {token}, Bearer x",
    ],
)
def test_wrong_credentials_are_unauthorized(server: BridgeServer, header: str | None) -> None:
    headers = {} if header is None else {"Authorization": header.format(token=server.token)}
    for method, path in (("GET", "/health"), ("POST", "/v1/sandboxes/x"), ("GET", "/nowhere")):
        resp = httpx.request(method, server.base_url + path, headers=headers, content=b"not json")
        assert error_of(resp) == (401, "unauthorized"), (method, path)


def test_an_authorization_header_over_4096_characters_is_refused(server: BridgeServer) -> None:
    good = server.bridge.token
    try:
        for length, status in ((4096 - 7, 200), (4097 - 7, 401)):  # "Bearer " is 7 characters
            server.bridge.token = "k" * length
            resp = httpx.get(server.base_url + "/health", headers={"Authorization": "Bearer " + "k" * length})
            assert resp.status_code == status, length
    finally:
        server.bridge.token = good


def test_unauthorized_requests_touch_no_workspace(server: BridgeServer) -> None:
    sandbox = new_id()
    resp = httpx.post(
        f"{server.base_url}/v1/sandboxes/{sandbox}", json={"persistent": True}, headers={"Authorization": "Bearer nope"}
    )
    assert resp.status_code == 401
    assert server.bridge.find(sandbox) is None


@pytest.mark.parametrize("secret", [None, "", "s" * 31, "s" * 20 + " " + "s" * 20, "s" * 40 + "\n"])
def test_missing_or_weak_server_secret_is_not_configured(server: BridgeServer, secret: str | None) -> None:
    good = server.bridge.token
    server.bridge.token = secret
    try:
        for token in (good, "anything"):
            for path in ("/health", "/v1/sandboxes/abc"):
                resp = httpx.get(server.base_url + path, headers={"Authorization": f"Bearer {token}"})
                assert error_of(resp) == (503, "not_configured")
    finally:
        server.bridge.token = good


def test_a_32_character_secret_is_enough(server: BridgeServer) -> None:
    good = server.bridge.token
    server.bridge.token = "k" * 32
    try:
        assert (
            httpx.get(server.base_url + "/health", headers={"Authorization": "Bearer " + "k" * 32}).status_code == 200
        )
    finally:
        server.bridge.token = good


def test_tokens_are_compared_as_fixed_length_digests(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bytes, bytes]] = []
    real = cf_protocol.hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        seen.append((a, b))
        return real(a, b)

    monkeypatch.setattr(cf_protocol.hmac, "compare_digest", spy)
    secret = "q" * 40
    assert cf_protocol.authorized(f"Bearer {secret}", secret)
    assert not cf_protocol.authorized("Bearer short", secret)
    assert [(len(a), len(b)) for a, b in seen] == [(32, 32), (32, 32)]
    assert seen[0][1] == hashlib.sha256(f"Bearer {secret}".encode()).digest()
