"""POST /read: the raw bytes of one file, restoring a stopped workspace first."""

from __future__ import annotations

from .bridge_client import (
    Client,
    error_of,
)


def test_read_returns_raw_bytes(client: Client, sid: str) -> None:
    cwd = client.exec(sid, r"printf 'a\xff\x00b' > bin; mkdir -p dir; pwd").output.strip()
    resp = client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/bin"})
    assert resp.status_code == 200 and resp.content == b"a\xff\x00b"
    assert resp.headers["content-type"] == "application/octet-stream"
    assert resp.headers["x-file-size"] == "4" and resp.headers["cache-control"] == "no-store"
    assert error_of(client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/nope"})) == (404, "file_not_found")
    assert error_of(client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/dir"})) == (400, "not_a_file")
    assert error_of(client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/bin", "max_bytes": 3})) == (
        413,
        "file_too_large",
    )
    assert client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/bin", "max_bytes": 4}).content == b"a\xff\x00b"
    for bad in (
        {"path": "workspace/bin"},
        {"path": "/x", "max_bytes": -1},
        {"path": "/x", "max_bytes": 1.5},
        {"path": "/x", "max_bytes": 2**30 + 1},
    ):
        assert error_of(client.post(f"/v1/sandboxes/{sid}/read", bad)) == (400, "invalid_field")
    assert client.status(sid).json()["busy"] is False


def test_read_restores_a_stopped_workspace(client: Client, sid: str) -> None:
    cwd = client.exec(sid, "echo snap > s; pwd").output.strip()
    client.post(f"/v1/sandboxes/{sid}/release")
    assert client.post(f"/v1/sandboxes/{sid}/read", {"path": f"{cwd}/s"}).content == b"snap\n"
