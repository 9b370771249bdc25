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


@pytest.fixture
def tmpdir_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR for the code under test; the test fails if anything (gpg's homedir...) is left in it."""
    root = tmp_path / "tmpdir"
    root.mkdir()
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    yield root
    assert not list(root.iterdir()), f"left in TMPDIR: {list(root.iterdir())}"
    assert not child_pids(), "a child process (gpg?) was left running"
