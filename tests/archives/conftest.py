"""Archive tests run with their own TMPDIR, and check that nothing is left in it or running after them."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from conformance.leftovers import descendants


def gpg_children() -> list[int]:
    """Processes below this one that run gpg."""
    found = []
    for pid in descendants():
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
