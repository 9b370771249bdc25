"""The box owner a test expects the fakes to give files to."""

from __future__ import annotations

import os
from typing import Any

import pytest

from fakes import boxfs


def box_owner(world: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """The world's box owner; where the box's root is this process itself, another one is set for the test
    (meaningful as root only), so that a file left with this process's ids shows."""
    owner = boxfs.box_owner(world)
    if owner == (os.geteuid(), os.getegid()):
        owner = (4242, 4343)
        monkeypatch.setattr(world, "box_uid", owner[0], raising=False)
        monkeypatch.setattr(world, "box_gid", owner[1], raising=False)
    return owner


def owned(path: Any) -> tuple[int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid
