"""Limits and bad input on the Upstash fake: JSON bodies and frames, NUL bytes, uploads that stream."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from upstash_box import BoxError

from fakes.upstash import Settings

from .helpers import Fake

ROOT = Path(__file__).resolve().parents[3]
MIB = 1024 * 1024


def _box(fake: Fake) -> str:
    return str(httpx.post(f"{fake.url}/v2/box", headers=fake.headers, json={}).json()["id"])


def _post_raw(fake: Fake, path: str, body: bytes) -> httpx.Response:
    return httpx.post(
        fake.url + path, headers={**fake.headers, "Content-Type": "application/json"}, content=body, timeout=30
    )


@pytest.mark.parametrize("depth", [100_000, 65])
def test_deeply_nested_json_is_a_400_that_says_so(fake: Fake, depth: int):
    box = _box(fake)
    deep = b"[" * depth + b"]" * depth
    for path in ("/v2/box", f"/v2/box/{box}/exec", f"/v2/box/{box}/files/write", f"/v2/box/{box}/files/mkdir"):
        resp = _post_raw(fake, path, b'{"a":' + deep + b"}")
        assert resp.status_code == 400 and "deeper than 64 levels" in resp.json()["error"], (path, resp.text)


def test_json_nesting_within_the_limit_is_accepted(fake: Fake):
    policy: object = {"mode": "allow-all"}
    for _ in range(60):
        policy = {"nested": policy}
    assert httpx.post(f"{fake.url}/v2/box", headers=fake.headers, json={"network_policy": policy}).status_code == 200


def test_malformed_json_is_a_400_that_says_so(fake: Fake):
    resp = _post_raw(fake, "/v2/box", b'{"name": ')
    assert resp.status_code == 400 and "is not valid JSON" in resp.json()["error"]


def test_a_json_body_over_the_limit_is_413(fake: Fake):
    fake.settings.max_json_bytes = 4096
    body = json.dumps({"path": "f", "content": "x" * 5000}).encode()
    box = _box(fake)
    declared = _post_raw(fake, f"/v2/box/{box}/files/write", body)
    assert declared.status_code == 413 and "4096 bytes" in declared.json()["error"]
    chunked = httpx.post(
        f"{fake.url}/v2/box/{box}/files/write",
        content=iter([body[:3000], body[3000:]]),
        headers={**fake.headers, "Content-Type": "application/json"},
    )
    assert chunked.status_code == 413, "a body without Content-Length is counted as it arrives"
    assert (
        httpx.post(
            f"{fake.url}/v2/box/{box}/files/write", headers=fake.headers, json={"path": "f", "content": "small"}
        ).status_code
        == 200
    )


def test_nul_bytes_in_commands_argv_and_paths_are_a_400_that_says_so(fake: Fake):
    box = _box(fake)
    h, base = fake.headers, f"{fake.url}/v2/box/{box}"
    for resp in (
        httpx.post(f"{base}/exec", headers=h, json={"command": ["echo", "a\0b"]}),
        httpx.post(f"{base}/exec-stream", headers=h, json={"command": ["echo\0", "x"]}),
        httpx.post(f"{base}/exec", headers=h, json={"command": ["true"], "folder": "/workspace/home/a\0b"}),
        httpx.get(f"{base}/files/read", headers=h, params={"path": "a\0b"}),
        httpx.post(f"{base}/files/write", headers=h, json={"path": "a\0b", "content": "x"}),
        httpx.post(f"{fake.url}/v2/box", headers=h, json={"env_vars": {"A": "a\0b"}}),
        httpx.post(f"{fake.url}/v2/box", headers=h, json={"name": "a\0b"}),
    ):
        assert resp.status_code == 400 and "NUL" in resp.json()["error"], resp.text
    sdk_box = fake.create()
    for start in ({"cmd": "echo a\0b"}, {"argv": ["echo", "a\0b"]}, {"cmd": "true", "cwd": "/workspace/home/\0"}):
        with pytest.raises(BoxError, match="NUL"):
            sdk_box.exec.session(**start)


def test_an_upload_over_the_limit_is_413_and_names_it(fake: Fake):
    fake.settings.max_upload_bytes = MIB
    box = _box(fake)
    files = [("paths", (None, "/workspace/home/big")), ("files", ("big", b"x" * (2 * MIB)))]
    resp = httpx.post(f"{fake.url}/v2/box/{box}/files/upload", headers=fake.headers, files=files)
    assert resp.status_code == 413 and "1 MiB" in resp.json()["error"]
    workspace = fake.world.get(box).workspace_dir  # type: ignore[union-attr]
    assert list(workspace.iterdir()) == [], "nothing of a refused upload stays"


def test_a_read_without_length_is_bounded_like_one_with_it(fake: Fake):
    fake.settings.read_max_bytes = 1000
    box = fake.create()
    box.files.write(path="f", content="x" * 1001)
    with pytest.raises(BoxError) as info:
        box.files.read("f")
    assert info.value.status_code == 400 and "offset and length" in info.value.message
    assert box.files.read("f", offset=1, length=1000) == "x" * 1000


_SERVER = r"""
import json, sys
from fakes.upstash import Settings, UpstashServer
srv = UpstashServer(settings=Settings(max_upload_bytes=1 << 30)).start()
print(json.dumps({"url": srv.base_url, "key": srv.api_key}), flush=True)
sys.stdin.read()
srv.stop()
"""


def _peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM"))


def test_a_large_upload_streams_to_disk_instead_of_sitting_in_memory(tmp_path: Path):
    size = 128 * MIB
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        info = json.loads(server.stdout.readline())  # type: ignore[union-attr]
        h = {"X-Box-Api-Key": info["key"]}
        box = httpx.post(info["url"] + "/v2/box", headers=h, json={}).json()["id"]
        before = _peak_kib(server.pid)
        with tempfile.TemporaryFile(dir=tmp_path) as fh:
            block = os.urandom(MIB)
            for _ in range(size // MIB):
                fh.write(block)
            fh.seek(0)
            resp = httpx.post(
                f"{info['url']}/v2/box/{box}/files/upload",
                headers=h,
                timeout=300,
                data={"paths": ["/workspace/home/big.bin"]},
                files=[("files", ("big.bin", fh))],
            )
        assert resp.status_code == 200, resp.text
        grown = (_peak_kib(server.pid) - before) // 1024
        assert grown < 48, f"the server's peak RSS grew {grown} MiB for a {size // MIB} MiB upload"
        stat = httpx.get(f"{info['url']}/v2/box/{box}/files/stat", headers=h, params={"path": "big.bin"}).json()
        assert stat["size"] == size
    finally:
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(30)


def test_the_session_frame_limit_is_a_stated_setting():
    assert Settings().ws_max_message_bytes == 64 * MIB and Settings().max_json_depth == 64
