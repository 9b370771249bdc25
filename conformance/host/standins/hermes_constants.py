"""Stand-in for ``hermes_constants``: where Hermes keeps its home."""

from __future__ import annotations

import os
from pathlib import Path


def get_hermes_home() -> Path:
    value = os.environ.get("HERMES_HOME", "").strip()
    return Path(value) if value else Path.home() / ".hermes"
