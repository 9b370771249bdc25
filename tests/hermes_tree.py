"""A minimal installed-Hermes tree on disk, and a child interpreter that imports it.

Enough of Hermes's layout for the kit's hermes host to take it (``hermes_cli`` with a
version, ``tools.environments.base.BaseEnvironment``), plus whatever files a test adds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def minimal_tree(root: Path, version: str, files: dict[str, str] | None = None) -> Path:
    """Write the tree under ``root``: hermes_cli at ``version``, a BaseEnvironment, and ``files`` (path: text)."""
    layout = {
        "hermes_cli/__init__.py": f'__version__ = "{version}"\n',
        "tools/__init__.py": "",
        "tools/environments/__init__.py": "",
        "tools/environments/base.py": "class BaseEnvironment:\n    pass\n",
        **(files or {}),
    }
    for relative, text in layout.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def run_in_tree(root: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child interpreter that imports Hermes from ``root``."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
