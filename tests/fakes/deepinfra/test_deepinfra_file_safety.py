"""The DeepInfra fake's fs/content against a hostile sandbox: symlink races, files given to its owner."""

from __future__ import annotations

import collections
import os
import threading
from pathlib import Path

import httpx
import pytest

from fakes.deepinfra.testing import Tenant

from ..owner import box_owner, owned
from ..symlink_race import SymlinkSwapper, escaped

THREADS, ROUNDS = 6, 120


def test_concurrent_writes_never_land_outside_the_sandbox(
    fake: Tenant,
    sandbox,  # type: ignore[no-untyped-def]
    tmp_path: Path,
):
    outside = tmp_path / "host-dir"
    outside.mkdir()
    box = fake.box(sandbox.id)
    url = f"{fake.server.base_url}/v1/sandboxes/{sandbox.id}/fs/content"
    statuses: collections.Counter[int | str] = collections.Counter()
    lock = threading.Lock()

    def writer(worker: int) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {fake.key}"}, timeout=30) as client:
            for r in range(ROUNDS):
                try:
                    code: int | str = client.put(
                        url, params={"path": f"/workspace/up/f{worker}-{r}"}, content=b"payload\n"
                    ).status_code
                except httpx.HTTPError as exc:
                    code = type(exc).__name__
                with lock:
                    statuses[code] += 1

    with SymlinkSwapper(fake.server.world, box, "up", outside) as swapper:
        workers = [threading.Thread(target=writer, args=(w,)) for w in range(THREADS)]
        for t in workers:
            t.start()
        for t in workers:
            t.join(120)
    landed = escaped(outside)
    print(f"writes: {dict(statuses)}; sent {THREADS * ROUNDS}; swaps {swapper.swaps}; outside: {len(landed)}")
    assert swapper.swaps > 100, "the sandbox never raced"
    assert statuses[500] == 0, f"a race is not a server error: {dict(statuses)}"
    assert not landed, f"{len(landed)} files escaped the sandbox, e.g. {landed[:5]}"
    assert set(statuses) <= {200, 400}, dict(statuses)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_what_fs_content_creates_belongs_to_the_sandbox_owner(
    fake: Tenant,
    sandbox,  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch,
):
    owner = box_owner(fake.server.world, monkeypatch)
    sandbox.fs.write("/workspace/new/dir/f.bin", b"x")
    ws = fake.box(sandbox.id).workspace_dir
    for rel in ("new", "new/dir", "new/dir/f.bin"):
        assert owned(ws / rel) == owner, rel
    sandbox.stop()
    box = fake.box(sandbox.id)
    assert owned(box.home_dir) == owner and owned(box.tmp_dir) == owner, "a stop resets home and /tmp as the box's"
