"""Write a Hermes home's ``config.yaml`` the way Hermes writes it.

Hermes saves config.yaml in block style with its keys in the order they were
set (not sorted), through a temporary file in the same directory that is
flushed, synced and renamed over the old one (a reader never sees half a
file), and makes it readable by its owner only.  The run's Hermes home is
written the same way, so a backend reading ``terminal.<name>`` there through
``hermes_cli.config`` (or by hand) gets the run's terminal settings as a user's
``hermes config set`` would have left them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml


def write_config(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=str(path.parent), prefix=f".{path.stem}_", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yaml.safe_dump(data, handle, default_flow_style=False, sort_keys=False, allow_unicode=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
