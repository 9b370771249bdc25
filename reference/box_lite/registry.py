"""The registry of boxes and the runtime manifest: small JSON files, private and published atomically.

``registry.json`` (config_dir) names every box this home manages and what it
was made with; ``runtime-manifest`` (config_dir) records the versions of the
tools Box Lite runs with, for diagnosis (archives carry a copy).  Both are
mode 0600 and replaced whole (``records.publish_atomic``).  Writers that read,
change and write the registry hold an exclusive flock on a sibling lock file
for the whole update, so two commands registering boxes at once both land.  A file that is not the
JSON this module wrote is a BoxError saying so and how to recover, never
silently replaced.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reference.box_lite.endpoint import endpoints
from reference.box_lite.errors import BoxError
from reference.box_lite.paths import BoxHome, check_name
from reference.box_lite.records import json_bytes, publish_atomic, utc_now

FORMAT = 1


def read_json(path: Path, what: str, fix: str) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file does not exist; a BoxError when it is not one."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BoxError(f"cannot read the {what} {path}", exc.strerror or str(exc), f"check its permissions; {fix}")
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BoxError(f"the {what} {path} is corrupt", "it is not UTF-8 text", fix)
    except json.JSONDecodeError as exc:
        raise BoxError(f"the {what} {path} is corrupt", f"not JSON at line {exc.lineno} column {exc.colno}", fix)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BoxError(f"the {what} {path} is corrupt", f"it is not a format-{FORMAT} Box Lite file", fix)
    return data


class Registry:
    """``registry.json``: ``{"format": 1, "boxes": {NAME: {created_at, network, ...}}}``.

    Reads need no lock (the file is replaced whole); ``update()`` is the one way to change it.
    """

    def __init__(self, home: BoxHome) -> None:
        self.home = home
        self.path = home.registry_file

    def _fix(self) -> str:
        return (
            f"move it aside (mv {self.path} {self.path}.bad); each box's own box.json under "
            f"{self.home.boxes_dir} is kept, and `hermes-box repair NAME` registers a box again"
        )

    def read(self) -> dict[str, Any]:
        data = read_json(self.path, "box registry", self._fix())
        if data is None:
            return {"format": FORMAT, "boxes": {}}
        boxes = data.get("boxes")
        if not isinstance(boxes, dict) or not all(isinstance(v, dict) for v in boxes.values()):
            raise BoxError(f"the box registry {self.path} is corrupt", "its 'boxes' is not a map of boxes", self._fix())
        return data

    def boxes(self) -> dict[str, dict[str, Any]]:
        """Every registered box's entry, by name."""
        return dict(self.read()["boxes"])

    def names(self) -> list[str]:
        return sorted(self.boxes())

    def get(self, name: str) -> dict[str, Any] | None:
        return self.boxes().get(name)

    @contextlib.contextmanager
    def update(self) -> Iterator[dict[str, dict[str, Any]]]:
        """Yield the boxes map under the registry's exclusive lock; publish it if the block succeeds."""
        self.home.config_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.home.registry_lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = self.read()
            boxes: dict[str, dict[str, Any]] = data["boxes"]
            before = json.dumps(boxes, sort_keys=True)
            yield boxes
            if json.dumps(boxes, sort_keys=True) != before or not self.path.exists():
                data["boxes"] = boxes
                data["updated_at"] = utc_now()
                publish_atomic(self.path, json_bytes(data))
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def put(self, name: str, entry: dict[str, Any]) -> None:
        """Register ``name`` (or replace its entry)."""
        check_name(name)
        with self.update() as boxes:
            boxes[name] = dict(entry)

    def remove(self, name: str) -> bool:
        """Forget ``name``; whether it was registered."""
        with self.update() as boxes:
            return boxes.pop(name, None) is not None


# --- runtime manifest ---------------------------------------------------------------------------


def _first_line(argv: list[str]) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=3, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    out = (done.stdout or done.stderr).strip().splitlines()
    return out[0].strip() if out else None


def tool_versions() -> dict[str, str]:
    """The versions Box Lite runs with: itself, Python, the kernel, tmux and gpg (those present)."""
    from importlib import metadata

    versions: dict[str, str] = {
        "python": platform.python_version(),
        "kernel": f"{platform.system()} {platform.release()}",
        "isolation": "namespaces",
    }
    try:
        versions["hermes-box"] = metadata.version("hermes-backend-kit")
    except metadata.PackageNotFoundError:
        pass
    for tool, argv in (("tmux", ["tmux", "-V"]), ("gpg", ["gpg", "--version"])):
        line = _first_line(argv)
        if line:
            versions[tool] = line
    return versions


class RuntimeManifest:
    """``runtime-manifest``: ``{"format": 1, "published_at", "tools": {...}, "executable", "endpoints"}``
    (0600, atomic); ``endpoints`` maps each box with a forwarded endpoint to its URL and bearer token."""

    def __init__(self, home: BoxHome) -> None:
        self.path = home.manifest_file
        self.home = home

    def read(self) -> dict[str, Any] | None:
        return read_json(self.path, "runtime manifest", f"remove {self.path}; the next command publishes it again")

    def publish(self, tools: dict[str, str] | None = None) -> dict[str, Any]:
        """Write the current tool versions (``tools`` when given) and return what was written."""
        data: dict[str, Any] = {
            "format": FORMAT,
            "published_at": utc_now(),
            "tools": tools if tools is not None else tool_versions(),
            "executable": sys.executable,
            "endpoints": endpoints(self.home),
        }
        publish_atomic(self.path, json_bytes(data))
        return data
