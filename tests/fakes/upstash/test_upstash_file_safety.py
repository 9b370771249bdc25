"""The Upstash fake's files API against a hostile box: symlink races, and files given to the box's owner."""

from __future__ import annotations

import collections
import os
import threading
from pathlib import Path

import httpx
import pytest

from ..owner import box_owner, owned
from ..symlink_race import SymlinkSwapper, escaped
from .helpers import Fake

THREADS, ROUNDS, FILES = 6, 40, 4


def _upload(client: httpx.Client, url: str, n: int) -> int:
    fields = [("paths", (None, f"/workspace/home/up/f{n}-{i}.txt")) for i in range(FILES)]
    files = [("files", (f"f{i}", b"payload %d\n" % i)) for i in range(FILES)]
    return client.post(url, files=[*fields, *files]).status_code


def test_concurrent_uploads_never_land_outside_the_box(fake: Fake, tmp_path: Path):
    outside = tmp_path / "host-dir"
    outside.mkdir()
    box_id = httpx.post(f"{fake.url}/v2/box", headers=fake.headers, json={}).json()["id"]
    box = fake.world.get(box_id)
    assert box is not None
    url = f"{fake.url}/v2/box/{box_id}/files/upload"
    statuses: collections.Counter[int | str] = collections.Counter()
    lock = threading.Lock()

    def uploader(worker: int) -> None:
        with httpx.Client(headers=fake.headers, timeout=30) as client:
            for r in range(ROUNDS):
                try:
                    code: int | str = _upload(client, url, worker * ROUNDS + r)
                except httpx.HTTPError as exc:
                    code = type(exc).__name__
                with lock:
                    statuses[code] += 1

    with SymlinkSwapper(fake.world, box, "up", outside) as swapper:
        workers = [threading.Thread(target=uploader, args=(w,)) for w in range(THREADS)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(120)
    landed = escaped(outside)
    print(
        f"uploads: {dict(statuses)}; files sent {THREADS * ROUNDS * FILES}; swaps {swapper.swaps}; "
        f"outside the box: {len(landed)}"
    )
    assert swapper.swaps > 100, "the box never raced"
    assert statuses[500] == 0, f"a race is not a server error: {dict(statuses)}"
    assert not landed, f"{len(landed)} files escaped the box, e.g. {landed[:5]}"
    assert set(statuses) <= {200, 403}, f"a link out of the box is permission_denied, nothing else: {dict(statuses)}"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_what_the_files_api_creates_belongs_to_the_box_owner(fake: Fake, monkeypatch: pytest.MonkeyPatch):
    owner = box_owner(fake.world, monkeypatch)
    box_id = httpx.post(f"{fake.url}/v2/box", headers=fake.headers, json={}).json()["id"]
    base = f"{fake.url}/v2/box/{box_id}/files"
    assert httpx.post(f"{base}/write", headers=fake.headers, json={"path": "w/a.txt", "content": "a"}).is_success
    assert httpx.post(f"{base}/mkdir", headers=fake.headers, json={"path": "m/n", "parents": True}).is_success
    files = [("paths", (None, "/workspace/home/u/b.bin")), ("files", ("b.bin", b"b"))]
    assert httpx.post(f"{base}/upload", headers=fake.headers, files=files).is_success
    ws = fake.world.get(box_id).workspace_dir  # type: ignore[union-attr]
    for rel in ("w", "w/a.txt", "m", "m/n", "u", "u/b.bin"):
        assert owned(ws / rel) == owner, rel
