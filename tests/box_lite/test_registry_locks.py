"""The box registry, the runtime manifest and per-box locks, with real files and real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reference.box_lite.errors import BoxError, BoxLocked
from reference.box_lite.locks import BoxLock, lock_state, read_holder
from reference.box_lite.paths import BoxHome
from reference.box_lite.records import publish_atomic
from reference.box_lite.registry import Registry, RuntimeManifest

ROOT = Path(__file__).resolve().parents[2]


def _python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), *args]


def test_registry_starts_empty_and_publishes_private_files(tmp_path: Path) -> None:
    home = BoxHome.at(tmp_path)
    registry = Registry(home)
    assert registry.boxes() == {}
    assert not home.registry_file.exists()
    registry.put("alpha", {"network": True})
    assert registry.get("alpha") == {"network": True}
    assert home.registry_file.stat().st_mode & 0o777 == 0o600
    data = json.loads(home.registry_file.read_text())
    assert data["format"] == 1 and data["boxes"] == {"alpha": {"network": True}}
    assert registry.remove("alpha") is True
    assert registry.remove("alpha") is False
    assert registry.names() == []
    # No temporary file is left next to it.
    assert sorted(p.name for p in home.config_dir.iterdir()) == [".registry.lock", "registry.json"]


def test_a_failed_update_publishes_nothing(tmp_path: Path) -> None:
    registry = Registry(BoxHome.at(tmp_path))
    registry.put("alpha", {"n": 1})
    with pytest.raises(RuntimeError), registry.update() as boxes:
        boxes["beta"] = {}
        raise RuntimeError("midway")
    assert registry.names() == ["alpha"]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"{not json", "not JSON at line 1"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"format": 9, "boxes": {}}', "not a format-1"),
        (b"[]", "not a format-1"),
        (b'{"format": 1, "boxes": []}', "not a map of boxes"),
    ],
)
def test_a_corrupt_registry_is_a_clear_error_and_is_not_replaced(tmp_path: Path, content: bytes, why: str) -> None:
    home = BoxHome.at(tmp_path)
    home.config_dir.mkdir(parents=True)
    home.registry_file.write_bytes(content)
    registry = Registry(home)
    with pytest.raises(BoxError) as info:
        registry.boxes()
    assert "corrupt" in info.value.what and why in info.value.why
    assert "mv " in info.value.fix and "repair" in info.value.fix
    with pytest.raises(BoxError):
        registry.put("alpha", {})
    assert home.registry_file.read_bytes() == content


def test_publish_atomic_replaces_whole_and_keeps_mode(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_text("old")
    os.chmod(target, 0o644)
    publish_atomic(target, b"new")
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_concurrent_writers_all_land(tmp_path: Path) -> None:
    """Eight processes each register twenty boxes at once: every one of the 160 is registered."""
    code = """
        import sys
        from reference.box_lite.paths import BoxHome
        from reference.box_lite.registry import Registry
        reg = Registry(BoxHome.at(sys.argv[1]))
        for i in range(20):
            reg.put(f"w{sys.argv[2]}-{i}", {"i": i})
    """
    procs = [subprocess.Popen(_python(code, str(tmp_path), str(n)), cwd=ROOT) for n in range(8)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 8
    names = Registry(BoxHome.at(tmp_path)).names()
    assert len(names) == 160
    assert set(names) == {f"w{n}-{i}" for n in range(8) for i in range(20)}


def test_runtime_manifest_is_private_and_names_tools(tmp_path: Path) -> None:
    home = BoxHome.at(tmp_path)
    manifest = RuntimeManifest(home)
    assert manifest.read() is None
    written = manifest.publish()
    assert home.manifest_file.stat().st_mode & 0o777 == 0o600
    assert manifest.read() == written
    assert written["tools"]["python"].count(".") == 2
    home.manifest_file.write_text("garbage")
    with pytest.raises(BoxError) as info:
        manifest.read()
    assert "runtime manifest" in info.value.what and "corrupt" in info.value.what


HOLD = """
    import sys, time
    from reference.box_lite.locks import BoxLock
    from reference.box_lite.paths import BoxHome
    lock = BoxLock(BoxHome.at(sys.argv[1]), "alpha", "save")
    lock.acquire()
    print("held", flush=True)
    time.sleep(120)
"""


def _holder(tmp_path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(_python(HOLD, str(tmp_path)), cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_lock_names_its_holder(tmp_path: Path) -> None:
    home = BoxHome.at(tmp_path)
    proc = _holder(tmp_path)
    try:
        state, holder = lock_state(home, "alpha")
        assert state == "held" and holder is not None and holder.pid == proc.pid
        with pytest.raises(BoxLocked) as info:
            BoxLock(home, "alpha", "stop").acquire()
        message = info.value.what
        assert f"PID {proc.pid}" in message
        assert "(save)" in message and "since 20" in message
        assert f"end PID {proc.pid}" in info.value.fix
    finally:
        proc.kill()
        proc.wait()


def test_a_lock_whose_owner_was_killed_is_recovered(tmp_path: Path) -> None:
    home = BoxHome.at(tmp_path)
    proc = _holder(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # The record of the dead owner is still in the file; the kernel released its flock.
    holder = read_holder(home.run("alpha").lock)
    assert holder is not None and holder.pid == proc.pid and not holder.alive()
    assert lock_state(home, "alpha")[0] == "stale"
    lock = BoxLock(home, "alpha", "stop")
    with lock:
        assert lock.recovered is not None and lock.recovered.pid == proc.pid
        mine = read_holder(home.run("alpha").lock)
        assert mine is not None and mine.pid == os.getpid() and mine.action == "stop"
        assert lock_state(home, "alpha")[0] == "held"
    assert lock_state(home, "alpha") == ("free", None)


def test_the_lock_is_reentrant_within_a_process_and_exclusive_across(tmp_path: Path) -> None:
    home = BoxHome.at(tmp_path)
    outer = BoxLock(home, "alpha", "load")
    with outer:
        with BoxLock(home, "alpha", "create"):
            pass
        assert lock_state(home, "alpha")[0] == "held"  # the inner release kept the outer hold
        probe = """
            import sys
            from reference.box_lite.errors import BoxLocked
            from reference.box_lite.locks import BoxLock
            from reference.box_lite.paths import BoxHome
            try:
                BoxLock(BoxHome.at(sys.argv[1]), "alpha", "rm").acquire()
            except BoxLocked as exc:
                print(exc.what)
                sys.exit(3)
        """
        done = subprocess.run(_python(probe, str(tmp_path)), cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 3, done.stderr
        assert f"PID {os.getpid()}" in done.stdout
    assert lock_state(home, "alpha") == ("free", None)


def test_a_child_process_does_not_inherit_the_lock(tmp_path: Path) -> None:
    """A daemon started while a lock is held must not keep the box locked after its parent is done."""
    home = BoxHome.at(tmp_path)
    with BoxLock(home, "alpha", "start"):
        child = subprocess.Popen(["sleep", "60"], pass_fds=())
    try:
        assert lock_state(home, "alpha") == ("free", None)
        with BoxLock(home, "alpha", "stop"):
            pass
    finally:
        child.kill()
        child.wait()
