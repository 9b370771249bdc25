"""The manifest: the first member of every archive, ``manifest.json``, for diagnosis.

``{"format": 1, "kind": "box" | "workspace", "name": ..., "created_at": "<UTC ISO 8601>",
"tools": {"hermes-backend-kit": ..., "python": ..., "gpg": ...}, "settings": {...}}``.  ``format``
is the only field a reader depends on; the others say what the archive holds and what made it.
``settings`` (optional) holds what defines the tree's home beyond its files (a box's network, for
``hermes-box load``).  Unknown extra fields are kept (a newer writer may add some) and ignored.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from importlib import metadata
from typing import Any

from archives.errors import UnknownFormat, WrongKind

FORMAT = 1
KINDS = ("box", "workspace")
NAME = "manifest.json"
MAX_SIZE = 64 * 1024  # a manifest is a few hundred bytes; anything large is not one


@dataclass(frozen=True)
class Manifest:
    kind: str
    name: str
    created_at: str
    tools: dict[str, str] = field(default_factory=dict)
    format: int = FORMAT
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def new(
        cls, kind: str, name: str, tools: dict[str, str] | None = None, settings: dict[str, Any] | None = None
    ) -> Manifest:
        """A manifest for an archive written now, recording this machine's tool versions (and ``settings``)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        stamp = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        extra = {"settings": dict(settings)} if settings else {}
        return cls(kind=kind, name=name, created_at=stamp, tools={**tool_versions(), **(tools or {})}, extra=extra)

    @property
    def settings(self) -> dict[str, Any]:
        """The recorded settings; {} when the writer recorded none (or something that is not an object)."""
        found = self.extra.get("settings")
        return dict(found) if isinstance(found, dict) else {}

    def to_bytes(self) -> bytes:
        body = {
            **self.extra,
            "format": self.format,
            "kind": self.kind,
            "name": self.name,
            "created_at": self.created_at,
            "tools": self.tools,
        }
        return (json.dumps(body, indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_bytes(cls, raw: bytes) -> Manifest:
        """Parse and check a manifest; ``UnknownFormat`` says what is wrong with it."""
        fix = "use an archive written by hermes-box save or hermes-backend-kit workspace save"
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise UnknownFormat("the archive's manifest.json is not JSON", str(exc), fix) from None
        if not isinstance(body, dict):
            raise UnknownFormat("the archive's manifest.json is not a JSON object", type(body).__name__, fix)
        version = body.get("format")
        if version != FORMAT:
            raise UnknownFormat(
                "the archive has an unknown format",
                f"its manifest says format {version!r}; this version of the kit reads format {FORMAT}",
                "open it with the version of the tools that wrote it (see the manifest's tools), or upgrade",
            )
        kind, name, created = body.get("kind"), body.get("name"), body.get("created_at")
        if kind not in KINDS or not isinstance(name, str) or not isinstance(created, str):
            raise UnknownFormat(
                "the archive's manifest is incomplete",
                f"format 1 needs kind in {KINDS}, a string name and a string created_at",
                fix,
            )
        tools = body.get("tools", {})
        tools = {str(k): str(v) for k, v in tools.items()} if isinstance(tools, dict) else {}
        extra = {k: v for k, v in body.items() if k not in {"format", "kind", "name", "created_at", "tools"}}
        return cls(kind=kind, name=name, created_at=created, tools=tools, format=FORMAT, extra=extra)

    def require_kind(self, kind: str | None) -> None:
        """``WrongKind`` unless this archive holds ``kind`` (None accepts any)."""
        if kind is not None and self.kind != kind:
            other = {"box": "hermes-box load", "workspace": "hermes-backend-kit workspace load"}[self.kind]
            raise WrongKind(
                f"the archive holds a {self.kind}, not a {kind}",
                f"its manifest says kind {self.kind!r} (name {self.name!r})",
                f"restore it with {other}",
            )


def tool_versions() -> dict[str, str]:
    """The versions of what writes an archive, recorded in its manifest."""
    return {
        "hermes-backend-kit": _kit_version(),
        "python": platform.python_version(),
        "gpg": gpg_version() or "unknown",
    }


def _kit_version() -> str:
    try:
        return metadata.version("hermes-backend-kit")
    except metadata.PackageNotFoundError:
        return "unknown"


@lru_cache(maxsize=1)
def gpg_version() -> str | None:
    """``gpg --version``'s number (e.g. ``2.2.40``); None when gpg cannot be run."""
    try:
        out = subprocess.run(
            ["gpg", "--version"], capture_output=True, text=True, timeout=30, env={"LC_ALL": "C", "PATH": _path()}
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"^gpg \(GnuPG[^)]*\) (\S+)", out, re.MULTILINE)
    return found.group(1) if found else None


def _path() -> str:
    return os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
