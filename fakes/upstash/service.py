"""The Upstash Box account model over the shared World: keys, names, quota, labels, BoxData.

Problems are raised as ``ApiError(status, message)``; the request skeleton
(fakes/rest_skeleton.py) turns them into ``{"error": message}`` bodies.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from fakes import bodies, box_paths, boxfs
from fakes.faults import Faults
from fakes.keys import Account
from fakes.rest_skeleton import ApiError, Context, VendorService
from fakes.world import CREATING, DELETED, ERROR, PAUSED, Box, World

from .settings import RUNTIMES, SIZES, Settings

_FS_ERRORS = {
    "not_found": (404, "no such file or directory"),
    "not_a_directory": (400, "not a directory"),
    "is_a_directory": (400, "is a directory"),
    "not_a_file": (400, "not a regular file"),
    "exists": (409, "already exists"),
    "not_empty": (409, "directory not empty"),
    "loop": (400, "too many levels of symbolic links"),
    "invalid": (400, "invalid path"),
    "permission": (403, "permission_denied"),
}
_LABEL = re.compile(r"^[A-Za-z0-9._-]+$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def missing_cwd(exc: box_paths.NotInBox) -> ApiError:
    """A command's directory that the box does not have, as the exec routes answer it."""
    return ApiError(400, f"cwd {exc.path}: {exc.strerror}")


class BoxContext(Context):
    """A handler's view of the request: ``box()`` is the box the path's {id} (an id or a name) addresses
    (a deleted one only when deleted records are visible)."""

    svc: Service

    def live_box(self) -> Box:
        """The addressed box, 404 if deleted even when deleted records are visible."""
        box = self.box()
        if box.state == DELETED:
            raise ApiError(404, f"box not found: {self.key}")
        return box


class Service(VendorService):
    """Everything the routes share: the world, the faults, the accepted keys, the settings."""

    vendor = "Upstash Box"
    missing_key = "missing X-Box-Api-Key header"
    invalid_key = "invalid API key"
    no_box_in_path = "no box in the path"
    context_type = BoxContext
    settings: Settings

    def __init__(self, world: World, faults: Faults, api_keys: Iterable[str], settings: Settings | None = None):
        super().__init__(world, faults, api_keys, settings or Settings())
        self._create_lock = threading.Lock()  # name and quota checks and the create are one step

    # -- auth ----------------------------------------------------------------------------
    def presented_key(self, headers: Mapping[str, str]) -> str | None:
        return headers.get("x-box-api-key")

    def fault_box(self, account: Account, key: str | None) -> str | None:
        """A fault may name a box by id; the path may address it by name."""
        found = self.find(account, key, include_deleted=True) if key else None
        return found.id if found else key

    # -- lookup ----------------------------------------------------------------------------
    def find(self, account: Account, key: str, *, include_deleted: bool = False) -> Box | None:
        """The account's box with this id, or else this name (a live box wins a name)."""
        boxes = self.world.boxes(owner=account.digest, include_deleted=True)
        by_id = next((b for b in boxes if b.id == key), None)
        found = by_id or next((b for b in boxes if b.name == key and b.state != DELETED), None)
        if found is None or (found.state == DELETED and not include_deleted):
            return None
        return found

    def require(self, account: Account, key: str) -> Box:
        """The box, or 404; a deleted box is 404 unless deleted records are visible."""
        box = self.find(account, key, include_deleted=self.settings.deleted_visible)
        if box is None:
            raise ApiError(404, f"box not found: {key}")
        self.seen(box, account)
        return box

    def seen(self, box: Box, account: Account) -> None:
        box.credentials_seen.add(account.digest)

    def state(self, box: Box) -> str:
        return self.world.state(box)

    def require_usable(self, box: Box, what: str = "run commands") -> None:
        """Refuse work on a box that cannot do it, naming its state."""
        state = self.state(box)
        if state == DELETED:
            raise ApiError(404, f"box {box.id} is deleted")
        if state == CREATING:
            raise ApiError(409, f"box {box.id} is still being created; cannot {what} yet")
        if state == ERROR:
            raise ApiError(409, f"box {box.id} is in the error state; cannot {what}")
        if state in (PAUSED, "pausing"):
            raise ApiError(409, f"box {box.id} is paused; resume it to {what}")

    async def resume_for_exec(self, box: Box) -> None:
        """Auto-resume (paused_exec="resume"): resume and wait out the resume delay."""
        self.world.resume(box)
        deadline = time.monotonic() + self.world.resume_delay_s + 5
        while self.state(box) == "resuming" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    # -- paths ---------------------------------------------------------------------------
    def _absolute(self, path: Any) -> str:
        if not isinstance(path, str) or not path:
            raise ApiError(400, "path must be a non-empty string")
        bodies.no_nul(path, f"path {path!r}")
        if not path.startswith("/"):  # relative paths are relative to the workspace, like the SDK's
            path = self.world.layout.workspace + "/" + path
        return posixpath.normpath(path)

    def command_cwd(self, box: Box, path: Any) -> str:
        """Where a command starts, as the spawned process must see it: a directory of the box, resolved
        inside it (fakes.box_paths), whatever this machine has at that path.  The real service's answer
        to a missing one is not documented; a process cannot start in it, so the fake refuses it before
        the command starts, with a 400 naming the path."""
        path = self._absolute(path or self.world.layout.workspace)
        try:
            return box_paths.start_dir(self.world, box, path)
        except box_paths.NotInBox as exc:
            raise missing_cwd(exc)

    def files(self, box: Box) -> boxfs.BoxFS:
        """The box's files as the files API reaches them: the workspace, or (files_jail off) home and /tmp too."""
        parts = ("workspace",) if self.settings.files_jail else ("home", "workspace", "tmp")
        return boxfs.for_box(self.world, box, parts)

    def file_path(self, path: Any) -> str:
        """The absolute box path of a files-API path (relative ones are relative to the workspace)."""
        return self._absolute(path)

    def fs_error(self, exc: boxfs.FsError) -> ApiError:
        """A file operation's failure as the files API answers it (never a 500 for a path's problem)."""
        path = exc.path
        if exc.kind == "outside":
            where = self.world.layout.workspace if self.settings.files_jail else "the box's home, workspace and /tmp"
            return ApiError(
                403, f"permission_denied: {path} is outside {where} (or a symlink on the way leads out of it)"
            )
        status, text = _FS_ERRORS.get(exc.kind, (500, "file operation failed"))
        detail = f" ({exc.detail})" if exc.detail and exc.kind in ("invalid", "loop", "io") else ""
        return ApiError(status, f"{text}: {path}{detail}")

    # -- create --------------------------------------------------------------------------
    def create(self, account: Account, body: Any) -> Box:
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object")
        name = body.get("name")
        if name is not None and (
            not isinstance(name, str)
            or not name.strip()
            or "/" in name
            or "\0" in name
            or any(c.isspace() for c in name)
            or len(name) > 128
        ):
            raise ApiError(400, "name must be a non-empty string without spaces, '/' or NUL, at most 128 characters")
        size = body.get("size", "small")
        if size not in SIZES:
            raise ApiError(400, f"invalid size {size!r}; one of {', '.join(SIZES)}")
        runtime = body.get("runtime")
        if runtime is not None and runtime not in RUNTIMES:
            raise ApiError(400, f"invalid runtime {runtime!r}; one of {', '.join(RUNTIMES)}")
        labels = body.get("labels") or []
        if not isinstance(labels, list):
            raise ApiError(400, "labels must be a list of strings")
        labels = list(dict.fromkeys(labels))
        for label in labels:
            self.check_label(label)
        if len(labels) > self.settings.max_labels:
            raise ApiError(400, f"too many labels: at most {self.settings.max_labels}")
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
        ):
            raise ApiError(400, "env_vars must map strings to strings")
        for key, value in env_vars.items():
            bodies.no_nul(key, "an env_vars name")
            bodies.no_nul(value, f"env_vars[{key!r}]")
        keep_alive = body.get("keep_alive", False)
        if not isinstance(keep_alive, bool):
            raise ApiError(400, "keep_alive must be a boolean")
        meta: dict[str, object] = {
            "size": size,
            "runtime": runtime,
            "keep_alive": keep_alive,
            "env_vars": {k: v for k, v in env_vars.items() if _ENV_KEY.match(k)},
            "browser": bool(body.get("browser", False)),
            "network_policy": body.get("network_policy") or {"mode": "allow-all"},
            "model": body.get("model"),
            "agent": body.get("agent"),
            "enabled_skills": list(body.get("skills") or []),
            "init_command": body.get("init_command"),
            "blob_token": "blob_fake_" + secrets.token_hex(12) if self.settings.blob_token else None,
        }
        if body.get("ephemeral"):
            ttl = body.get("ttl")
            meta["ephemeral"] = True
            meta["expires_at"] = int(time.time() * 1000) + int(ttl if isinstance(ttl, int) and ttl > 0 else 3600) * 1000
        with self._create_lock:
            mine = self.world.boxes(owner=account.digest)
            if name is not None and any(b.name == name for b in mine):
                raise ApiError(self.settings.name_conflict_status, f"a box named {name!r} already exists")
            if len(mine) >= self.settings.quota:
                raise ApiError(
                    self.settings.quota_status,
                    f"box limit reached: this API key already has {len(mine)} of {self.settings.quota} "
                    "boxes (paused boxes count); delete boxes you no longer need",
                )
            box = self.world.create(name=name, owner=account.digest, labels=labels, meta=meta)
        self.seen(box, account)
        return box

    # -- labels ----------------------------------------------------------------------------
    def check_label(self, label: Any) -> None:
        if (
            not isinstance(label, str)
            or not label
            or len(label) > self.settings.max_label_len
            or not _LABEL.match(label)
        ):
            raise ApiError(
                400, f"invalid label {label!r}: use 1-{self.settings.max_label_len} letters, digits, '.', '_' or '-'"
            )

    def add_label(self, box: Box, label: Any) -> list[str]:
        self.check_label(label)
        if label in box.labels:
            raise ApiError(409, "Label already added")
        if len(box.labels) >= self.settings.max_labels:
            raise ApiError(400, f"too many labels: at most {self.settings.max_labels}")
        box.labels.append(label)
        box.touch()
        return list(box.labels)

    def remove_label(self, box: Box, label: str) -> list[str]:
        if label not in box.labels:
            raise ApiError(404, "Label not found")
        box.labels.remove(label)
        box.touch()
        return list(box.labels)

    # -- representation ------------------------------------------------------------------
    def box_data(self, box: Box) -> dict[str, Any]:
        meta = box.meta
        data: dict[str, Any] = {
            "id": box.id,
            "name": box.name,
            "status": self.state(box),
            "created_at": box.created_at,
            "updated_at": box.updated_at,
            "last_activity_at": box.updated_at,
            "labels": list(box.labels),
            "size": meta.get("size", "small"),
            "keep_alive": bool(meta.get("keep_alive")),
            "runtime": meta.get("runtime"),
            "browser": bool(meta.get("browser")),
            "network_policy": meta.get("network_policy"),
            "model": meta.get("model"),
            "agent": meta.get("agent"),
            "enabled_skills": meta.get("enabled_skills") or [],
            "customer_id": "cus_" + (box.owner or "")[:12],
            "total_cpu_ns": _cpu_ns(box),
        }
        if meta.get("ephemeral"):
            data["ephemeral"] = True
            data["expires_at"] = meta.get("expires_at")
        return data

    def box_env(self, box: Box) -> dict[str, str]:
        """The variables every command in the box sees, before a start frame's overlay."""
        env_vars = box.meta.get("env_vars")
        env: dict[str, str] = dict(env_vars) if isinstance(env_vars, dict) else {}
        token = box.meta.get("blob_token")
        if isinstance(token, str):
            env["UPSTASH_BLOB_TOKEN"] = token
        return env

    def overlay_env(self, entries: Any) -> dict[str, str]:
        """A start frame's KEY=VALUE list, minus blocked keys and malformed entries (dropped silently)."""
        env: dict[str, str] = {}
        if not isinstance(entries, list):
            return env
        for entry in entries:
            if not isinstance(entry, str) or "=" not in entry or "\0" in entry:
                continue
            key, value = entry.split("=", 1)
            if _ENV_KEY.match(key) and key not in self.settings.blocked_env:
                env[key] = value
        return env

    def add_cpu(self, box: Box, cpu_ns: int) -> None:
        box.meta["total_cpu_ns"] = _cpu_ns(box) + cpu_ns


def _cpu_ns(box: Box) -> int:
    """The CPU time the box's commands have used (Box.meta keeps it as an int)."""
    value = box.meta.get("total_cpu_ns")
    return value if isinstance(value, int) else 0
