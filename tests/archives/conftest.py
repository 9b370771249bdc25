"""Archive tests run with their own TMPDIR, and check that nothing is left in it or running after them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest


def child_pids() -> list[int]:
    """Live processes whose parent is this one (a gpg left running would be one)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            found.append(int(entry))
    return found


def gpg_children() -> list[int]:
    """Children of this process that run gpg."""
    found = []
    for pid in child_pids():
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and os.path.basename(cmd[0]) == b"gpg":
            found.append(pid)
    return found


@pytest.fixture
def tmpdir_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR for the code under test; the test fails if anything (gpg's homedir...) is left in it, or if
    a gpg it started is still running.  Other children of this process are not the test's: under
    xdist another module's fake service, or the isolation engine's spare box set-up, which a
    background thread may start at any time."""
    before = set(gpg_children())
    root = tmp_path / "tmpdir"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    assert not list(root.iterdir()), f"left in TMPDIR: {list(root.iterdir())}"
    left = [pid for pid in gpg_children() if pid not in before]
    assert not left, f"gpg left running: pids {left}"
