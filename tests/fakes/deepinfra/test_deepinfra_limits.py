"""Limits and bad input on the DeepInfra fake: JSON bodies, NUL bytes in argv and paths (a 400, never a 500)."""

from __future__ import annotations

import json

import pytest
from deepinfra import BadRequestError

from fakes.deepinfra.testing import Tenant


def _raw(fake: Tenant, path: str, body: bytes):  # type: ignore[no-untyped-def]
    return fake.http("POST", path, content=body, headers={"Content-Type": "application/json"})


def test_a_nul_byte_in_exec_argv_is_a_400_that_says_so(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    for argv in (["echo", "a\0b"], ["ech\0o"]):
        resp = fake.http("POST", f"/v1/sandboxes/{sandbox.id}/exec", json={"command": argv})
        assert resp.status_code == 400 and "NUL" in resp.json()["detail"]["error"], resp.text
    with pytest.raises(BadRequestError, match="NUL"):
        sandbox.exec("echo", "a\0b")
    assert sandbox.exec("echo", "fine").stdout == "fine\n", "the sandbox still runs commands"


def test_a_nul_byte_in_a_path_is_a_400_that_says_so(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    resp = fake.http("GET", f"/v1/sandboxes/{sandbox.id}/fs/content", params={"path": "/workspace/a\0b"})
    assert resp.status_code == 400 and "NUL" in resp.json()["error"]
    with pytest.raises(BadRequestError, match="NUL"):
        sandbox.fs.write("/workspace/a\0b", b"x")


@pytest.mark.parametrize("depth", [100_000, 65])
def test_deeply_nested_json_is_a_400_that_says_so(fake: Tenant, sandbox, depth: int):  # type: ignore[no-untyped-def]
    deep = b'{"command":["true"],"x":' + b"[" * depth + b"]" * depth + b"}"
    for path in ("/v1/sandboxes", f"/v1/sandboxes/{sandbox.id}/exec"):
        resp = _raw(fake, path, deep)
        assert resp.status_code == 400 and "deeper than 64 levels" in resp.json()["detail"]["error"], resp.text


def test_malformed_json_is_a_400_that_says_so(fake: Tenant):
    resp = _raw(fake, "/v1/sandboxes", b'{"plan": ')
    assert resp.status_code == 400 and "not valid JSON" in resp.json()["detail"]["error"]


def test_a_json_body_over_the_limit_is_413(fake: Tenant, sandbox):  # type: ignore[no-untyped-def]
    fake.settings.max_json_bytes = 4096
    body = json.dumps({"command": ["echo", "x" * 5000]}).encode()
    resp = _raw(fake, f"/v1/sandboxes/{sandbox.id}/exec", body)
    assert resp.status_code == 413 and "4096 bytes" in resp.json()["detail"]["error"]
