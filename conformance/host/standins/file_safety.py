"""Stand-in for ``agent.file_safety``: the two Hermes-home helpers backends import from it.

Backends that name durable sandboxes per profile (the Sprites plugins) compare
the active home with the root of every profile.  As in Hermes 0.21 both come
from ``hermes_constants`` and fall back to ``~/.hermes`` if that cannot answer.
The write and read deny lists of the real module guard Hermes's own file tools,
not a terminal backend, and are not reproduced.
"""

from __future__ import annotations

import os
from pathlib import Path


def _hermes_home_path() -> Path:
    try:
        from hermes_constants import get_hermes_home

        return Path(get_hermes_home())
    except Exception:
        return Path(os.path.expanduser("~/.hermes"))


def _hermes_root_path() -> Path:
    try:
        from hermes_constants import get_default_hermes_root

        return Path(get_default_hermes_root())
    except Exception:
        return Path(os.path.expanduser("~/.hermes"))
