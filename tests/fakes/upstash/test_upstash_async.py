"""The Upstash fake through the SDK's async client (AsyncBox): every endpoint it calls."""

from __future__ import annotations

import asyncio
import base64
import time
from typing import Any

import pytest
from upstash_box import AsyncBox, BoxError

from fakes.faults import Fault
from fakes.upstash import WS_ROUTE

from .helpers import Fake

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_async_lifecycle(fake: Fake):
    async def main() -> None:
        box = await AsyncBox.create(name="async", labels=["hermes"], **fake.kw)
        assert (await AsyncBox.get_by_name("async", **fake.kw)).id == box.id
        assert [d.id for d in await AsyncBox.list(label="hermes", **fake.kw)] == [box.id]
        assert await box.get_status() == {"status": "idle"}
        await box.pause()
        assert (await box.get_status())["status"] == "paused"
        await box.resume()
        assert (await box.get_status())["status"] == "idle"
        assert await box.labels.add("extra") == ["hermes", "extra"]
        assert await box.labels.remove("hermes") == ["extra"]
        with pytest.raises(BoxError) as info:
            await box.labels.remove("hermes")
        assert info.value.status_code == 404
        other = await AsyncBox.create(**fake.kw)
        await AsyncBox.delete_boxes(box_ids=[other.id], **fake.kw)
        await box.delete()
        assert await AsyncBox.list(**fake.kw) == []
        with pytest.raises(BoxError) as info:
            await AsyncBox.get(box.id, **fake.kw)
        assert info.value.status_code == 404

    asyncio.run(main())


def test_async_create_polls_while_creating(fake: Fake):
    fake.world.create_delay_s = 0.2

    async def main() -> float:
        started = time.monotonic()
        box = await AsyncBox.create(**fake.kw)
        assert (await box.get_status())["status"] == "idle"
        return time.monotonic() - started

    assert asyncio.run(main()) >= 1.9


def test_async_exec_and_stream(fake: Fake):
    async def main() -> None:
        box = await AsyncBox.create(**fake.kw)
        run = await box.exec.command("echo hi; exit 2")
        assert (run.exit_code, run.stdout) == (2, "hi\n")
        stream = await box.exec.stream("echo a; echo b >&2")
        chunks = [c async for c in stream]
        assert "".join(getattr(c, "data", "") for c in chunks) == "a\nb\n" and chunks[-1].exit_code == 0

    asyncio.run(main())


def test_async_session(fake: Fake):
    async def main() -> None:
        box = await AsyncBox.create(**fake.kw)
        out, err = bytearray(), bytearray()

        async def on_err(data: bytes) -> None:  # an async callback is awaited
            err.extend(data)

        handle = await box.exec.session(
            cmd="cat; echo e >&2; exit 6", env=["X=1"], on_stdout=out.extend, on_stderr=on_err
        )
        assert handle.pid > 0
        await handle.write(bytes(range(256)))
        await handle.end_stdin()
        assert await handle.wait() == 6
        assert (bytes(out), bytes(err)) == (bytes(range(256)), b"e\n")

        sleeper = await box.exec.session(argv=["sleep", "30"])
        await sleeper.kill("KILL")
        assert await sleeper.wait() == 137

        tty = bytearray()
        handle = await box.exec.session(cmd="stty size", tty=True, rows=12, cols=34, on_stdout=tty.extend)
        assert await handle.wait() == 0 and tty.strip() == b"12 34"

        many = await asyncio.gather(*(_one(box, i) for i in range(4)))
        assert many == [(i, f"{i}\n".encode()) for i in range(4)]

        fake.faults.arm(Fault("drop", route=WS_ROUTE, after_bytes=2))
        dropped = bytearray()
        handle = await box.exec.session(cmd="echo 12345; sleep 30", on_stdout=dropped.extend)
        assert await handle.wait() == -1 and dropped == b"12"

        await box.pause()
        with pytest.raises(BoxError, match="paused"):
            await box.exec.session(cmd="true")

    asyncio.run(main())


async def _one(box: Any, i: int) -> tuple[int, bytes]:
    out = bytearray()
    handle = await box.exec.session(cmd=f"sleep 0.0{i}; echo {i}; exit {i}", on_stdout=out.extend)
    return await handle.wait(), bytes(out)


def test_async_files(fake: Fake, tmp_path, monkeypatch):
    async def main() -> None:
        box = await AsyncBox.create(**fake.kw)
        await box.files.write(path="a.txt", content="alpha")
        assert await box.files.read("a.txt") == "alpha"
        assert await box.files.read("a.txt", encoding="base64", offset=1, length=2) == base64.b64encode(b"lp").decode()
        await box.files.mkdir("d/e", parents=True)
        await box.files.rename("a.txt", "d/b.txt")
        assert [e.name for e in await box.files.list("d")] == ["b.txt", "e"]
        assert (await box.files.stat("d/b.txt")).size == 5
        (tmp_path / "u.bin").write_bytes(b"\x00\x01")
        await box.files.upload([{"path": str(tmp_path / "u.bin"), "destination": "d/u.bin"}])
        monkeypatch.chdir(tmp_path)
        await box.files.download(folder="d")
        assert (tmp_path / "d" / "u.bin").read_bytes() == b"\x00\x01"
        await box.files.remove("d", recursive=True)
        assert await box.files.list() == []

    asyncio.run(main())
