"""Box Lite's small files: JSON records published whole, and the UTC time stamps they carry.

Every file Box Lite keeps about a box (``box.json``, the registry, the runtime
manifest, the doctor's stop record, the daemon's ``init.pid``) is replaced
whole: written to a temporary file in the same directory with its final mode
(0600 by default) from the start, fsynced, renamed over the old one, and the
directory fsynced, so a reader sees the old file or the new one, never a part,
and a crash keeps one of the two.  This module imports only the standard
library, so the box daemon uses it too.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any

STAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def utc_now() -> str:
    """Now as UTC ISO 8601 with seconds (``2026-06-25T12:00:00Z``)."""
    return dt.datetime.now(dt.UTC).strftime(STAMP_FORMAT)


def parse_stamp(text: str) -> dt.datetime | None:
    """The UTC time a ``utc_now()`` stamp names; None when ``text`` is not one."""
    try:
        return dt.datetime.strptime(text, STAMP_FORMAT).replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def human_age(seconds: float) -> str:
    """An age in words for messages: ``42 s``, ``5 min``, ``3 h``, ``12 days``."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{int(seconds)} s"
    if seconds < 90 * 60:
        return f"{int(seconds // 60)} min"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} days"


def json_bytes(data: dict[str, Any]) -> bytes:
    """``data`` as the JSON text every record is written in (indented, keys sorted, a final newline)."""
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def publish_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old or the new file, never a part.

    On any failure the temporary file is removed and ``path`` is unchanged.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def read_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when it is missing, unreadable or not a JSON object."""
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def mark_stopped(record: Path, clean: bool) -> bool:
    """Record in a box's box.json whether it stopped cleanly (False while it runs, as its daemon records
    at start).  False when there is no readable box.json to record it in."""
    info = read_object(record)
    if info is None:
        return False
    info["stopped_cleanly"] = clean
    info["state_at"] = utc_now()
    publish_atomic(record, json_bytes(info))
    return True
