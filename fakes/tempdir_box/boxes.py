"""On-disk layout of temp-dir boxes, shared by the environment and the harness world.

    <root>/<box id>/meta.json   id, task id, state, persistence, owner digest
    <root>/<box id>/home/       the box user's $HOME
    <root>/<box id>/tmp/        the box's temp dir

A box is "running", "paused" or "error"; a box whose directory is gone is
deleted.  meta.json is replaced atomically so readers never see half of it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

STATES = ("running", "paused", "error")


def default_root() -> Path:
    configured = os.environ.get("TEMPDIR_BOX_ROOT", "").strip()
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"hermes-tempdir-box-{os.getuid()}"


def box_id_for(task_id: str, *, persistent: bool) -> str:
    """A filesystem-safe id; the digest keeps distinct task ids distinct."""
    slug = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")[:40] or "task"
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    box_id = f"{slug}-{digest}"
    return box_id if persistent else f"{box_id}-{secrets.token_hex(3)}"


def owner_digest(token: str | None) -> str | None:
    return hashlib.sha256(token.encode()).hexdigest()[:16] if token else None


@dataclass(frozen=True)
class Box:
    path: Path

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def home(self) -> Path:
        return self.path / "home"

    @property
    def tmp(self) -> Path:
        return self.path / "tmp"

    def exists(self) -> bool:
        return (self.path / "meta.json").is_file()

    def meta(self) -> dict:
        try:
            return json.loads((self.path / "meta.json").read_text("utf-8"))
        except (OSError, ValueError):
            return {}

    def state(self) -> str:
        return self.meta().get("state", "deleted") if self.exists() else "deleted"

    def write_meta(self, **fields: object) -> None:
        meta = {**self.meta(), **fields}
        tmp = self.path / f".meta.{os.getpid()}.{secrets.token_hex(4)}"
        tmp.write_text(json.dumps(meta), "utf-8")
        os.replace(tmp, self.path / "meta.json")

    def create(self, *, task_id: str, persistent: bool, owner: str | None) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)
        self.write_meta(
            id=self.id, task_id=task_id, state="running", persistent=persistent, owner=owner, created=int(time.time())
        )

    def delete(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self.path.parent == default_root() and not os.environ.get("TEMPDIR_BOX_ROOT", "").strip():
            # The per-user directory in the system temp dir is the provider's own: gone with its last box
            # (rmdir removes only an empty directory; a create racing this makes it again with parents).
            with contextlib.suppress(OSError):
                self.path.parent.rmdir()


def list_boxes(root: Path) -> list[Box]:
    if not root.is_dir():
        return []
    return [Box(p) for p in sorted(root.iterdir()) if (p / "meta.json").is_file()]
