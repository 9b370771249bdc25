"""The DeepInfra account model over the shared World: keys, the cap, states, stop/start, file paths.

A sandbox is a World box whose ``state`` holds the DeepInfra state and whose
``meta`` holds the plan, tags and the stop ``epoch`` (bumped by every stop,
failure or termination, so a running command can tell why it ended).  State
changes run on timers, so the SDK's polling sees creating -> starting ->
running and stopping -> stopped.  Nothing here knows HTTP: problems are raised
as ``ApiError`` and the routes render them.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fakes import boxfs, rest_skeleton
from fakes.faults import Fault, Faults
from fakes.keys import Account
from fakes.rest_skeleton import VendorService
from fakes.world import Box, World

from .settings import (
    ACTIVE_STATES,
    CREATING,
    DEFAULT_PLAN,
    DELETED,
    FAILED,
    IMAGE,
    PLANS,
    PROVIDER,
    RUNNING,
    STARTING,
    STOPPED,
    STOPPING,
    WORKSPACE,
    ErrorShape,
    Settings,
)


class ApiError(rest_skeleton.ApiError):
    """An error reply: ``shape`` picks {"detail": {"error": m}} or {"error": m}."""

    def __init__(self, status: int, message: str, shape: ErrorShape = "detail"):
        super().__init__(status, message)
        self.shape = shape

    def body(self) -> dict[str, Any]:
        return {"detail": {"error": self.message}} if self.shape == "detail" else {"error": self.message}


# The vendor fields this fake keeps in Box.meta, read back typed.
def epoch(box: Box) -> int:
    """How often the box's runs were ended (stop, restart): a run of an older epoch is stale."""
    value = box.meta.get("epoch", 0)
    return value if isinstance(value, int) else 0


def tags(box: Box) -> dict[str, str]:
    value = box.meta.get("tags")
    return dict(value) if isinstance(value, dict) else {}


@dataclass
class ExecRun:
    """One running exec: why it ended if the service ended it (timeout, stop, failure, termination)."""

    box: Box
    epoch: int
    ended_by: str | None = None
    kill: Callable[[], None] = field(default=lambda: None, repr=False)


class Service(VendorService):
    vendor = "DeepInfra"
    missing_key = "Missing bearer token"
    invalid_key = "Invalid API key"
    no_box_in_path = "Sandbox not found"
    settings: Settings

    def __init__(self, world: World, faults: Faults, api_keys: Iterable[str], settings: Settings | None = None):
        super().__init__(world, faults, api_keys, settings or Settings())
        self._lock = threading.RLock()  # state changes, the cap check and create are atomic
        self._runs: dict[str, list[ExecRun]] = {}
        self._fail_creates = 0

    # -- the wire --------------------------------------------------------------------
    def presented_key(self, headers: Mapping[str, str]) -> str | None:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        return token.strip() if scheme.lower() == "bearer" else None

    def error(self, status: int, message: str) -> ApiError:
        return ApiError(status, message)

    def fault_error(self, fault: Fault) -> ApiError:
        """A scripted status: the SDK retries 502, 503 and 504 on a GET, never on a POST, PUT or DELETE
        (deepinfra/clients/deepinfra.py)."""
        return ApiError(fault.status, fault.message, self.settings.fault_error_shape)

    # -- test hooks --------------------------------------------------------------------
    def fail_next_creates(self, count: int = 1) -> None:
        """The next ``count`` creates end in ``failed`` instead of ``running``."""
        with self._lock:
            self._fail_creates += count

    # -- lookup ------------------------------------------------------------------------
    def find(self, account: Account, sandbox_id: str) -> Box | None:
        """The account's sandbox, deleted ones included while they are still visible."""
        box = self.world.get(sandbox_id, include_deleted=True)
        if box is None or box.owner != account.digest or box.id != sandbox_id:
            return None
        deleted_at = box.meta.get("deleted_at", 0.0)
        if (
            box.state == DELETED
            and isinstance(deleted_at, float)
            and time.monotonic() - deleted_at > self.settings.deleted_visible_s
        ):
            return None
        return box

    def require(self, account: Account, sandbox_id: str) -> Box:
        box = self.find(account, sandbox_id)
        if box is None:
            raise ApiError(404, "Sandbox not found")
        box.credentials_seen.add(account.digest)
        return box

    def require_running(self, box: Box) -> None:
        if box.state == DELETED:
            raise ApiError(404, "Sandbox not found")
        if box.state != RUNNING:
            raise ApiError(409, f"Sandbox is {box.state}, not running")

    def visible(self, account: Account) -> list[Box]:
        boxes = self.world.boxes(owner=account.digest, include_deleted=True)
        return sorted((b for b in boxes if self.find(account, b.id) is not None), key=lambda b: b.created_at)

    def info(self, box: Box) -> dict[str, Any]:
        """SandboxInfo as the SDK reads it."""
        return {
            "sandbox_id": box.id,
            "plan": box.meta.get("plan", DEFAULT_PLAN),
            "image": IMAGE,
            "state": box.state,
            "tags": tags(box),
            "created_at": box.created_at // 1000,
            "provider": PROVIDER,
        }

    # -- lifecycle -----------------------------------------------------------------------
    def create(self, account: Account, body: Any) -> Box:
        if not isinstance(body, dict):
            raise ApiError(422, "request body must be a JSON object")
        plan = body.get("plan") or ""
        if not isinstance(plan, str):
            raise ApiError(422, "plan must be a string")
        plan = plan or DEFAULT_PLAN
        if plan not in {str(p["id"]) for p in PLANS}:
            known = ", ".join(str(p["id"]) for p in PLANS)
            raise ApiError(400, f"Unknown plan {plan!r}; available plans: {known}")
        tags = body.get("tags") or {}
        if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
            raise ApiError(422, "tags must map strings to strings")
        idle = body.get("timeout_seconds", 0)
        if not isinstance(idle, int) or isinstance(idle, bool) or idle < 0:
            raise ApiError(422, "timeout_seconds must be a non-negative integer")
        with self._lock:
            active = [b for b in self.world.boxes(owner=account.digest) if b.state in ACTIVE_STATES]
            if len(active) >= self.settings.max_active:
                raise ApiError(429, f"You have reached the maximum of {self.settings.max_active} active sandboxes")
            box = self.world.create(
                owner=account.digest,
                box_id="sb_" + secrets.token_hex(10),
                meta={"plan": plan, "tags": dict(tags), "idle_timeout_s": idle, "epoch": 0},
            )
            box.state = CREATING  # World.create marks it idle at once; DeepInfra states start here
            fails = self._fail_creates > 0
            self._fail_creates -= int(fails)
        box.credentials_seen.add(account.digest)
        boot = None if fails else (lambda: self._later(self.settings.boot_delay_s, box, STARTING, RUNNING))
        self._later(self.settings.create_delay_s, box, CREATING, FAILED if fails else STARTING, boot)
        return box

    def stop(self, box: Box, *, immediate: bool = False) -> None:
        """Kill every process, reset everything outside /workspace, then stopping -> stopped."""
        with self._lock:
            if box.state in (STOPPING, STOPPED):
                return  # already on its way
            if box.state != RUNNING:
                raise ApiError(409, f"Sandbox is {box.state}, cannot stop")
            box.state = STOPPED if immediate else STOPPING
            self._end_runs(box, "stopped")
            box.touch()
        self._kill_processes(box)
        self._reset_outside_workspace(box)
        if not immediate:
            self._later(self.settings.stop_delay_s, box, STOPPING, STOPPED)

    def start(self, box: Box) -> None:
        with self._lock:
            if box.state in (STARTING, RUNNING):
                return
            if box.state != STOPPED:
                raise ApiError(409, f"Sandbox is {box.state}, cannot start")
            box.state = STARTING
            box.touch()
        self._later(self.settings.boot_delay_s, box, STARTING, RUNNING)

    def terminate(self, box: Box) -> None:
        with self._lock:
            if box.state == DELETED:
                raise ApiError(404, "Sandbox not found")
            self._end_runs(box, "terminated")
            box.meta["deleted_at"] = time.monotonic()
        self.world.delete(box)  # kills its processes, removes its files, marks it deleted

    def fail(self, box: Box) -> None:
        """Behind the client's back: the sandbox breaks (state failed, processes gone)."""
        with self._lock:
            self._end_runs(box, "failed")
            box.state = FAILED
            box.touch()
        self._kill_processes(box)

    # -- internals of the state machine ----------------------------------------------------
    def _later(
        self, delay: float, box: Box, expect: str, then: str, and_then: Callable[[], None] | None = None
    ) -> None:
        """Move ``box`` from ``expect`` to ``then`` after ``delay`` (unless something moved it first)."""

        def move() -> None:
            with self._lock:
                if box.state != expect:
                    return
                box.state = then
                box.touch()
            if and_then is not None:
                and_then()

        if delay <= 0:
            move()
            return
        timer = threading.Timer(delay, move)
        timer.daemon = True
        timer.start()

    def _end_runs(self, box: Box, why: str) -> None:
        box.meta["epoch"] = epoch(box) + 1
        for run in self._runs.get(box.id, []):
            run.ended_by = run.ended_by or why

    def _kill_processes(self, box: Box) -> None:
        for proc in box.live_processes():
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGKILL)

    def _reset_outside_workspace(self, box: Box) -> None:
        """Back to the base image: an empty home and /tmp (the box's own again); /workspace is kept.

        The directories are emptied in place, never replaced: an isolated box
        has them bind-mounted, and a new directory would leave the box holding
        the deleted one.
        """
        uid, gid = boxfs.box_owner(self.world)
        for path, mode in ((box.home_dir, 0o755), (box.tmp_dir, 0o1777)):
            if path.is_symlink():
                path.unlink()
            path.mkdir(mode, exist_ok=True)
            with os.scandir(path) as entries:
                for entry in list(entries):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)  # never follows the box's symlinks
                    else:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry.path)
            os.chmod(path, mode, follow_symlinks=False)
            os.chown(path, uid, gid, follow_symlinks=False)

    # -- exec runs ----------------------------------------------------------------------------
    def track(self, run: ExecRun) -> None:
        with self._lock:
            self._runs.setdefault(run.box.id, []).append(run)
            if run.epoch != epoch(run.box):
                run.ended_by = "stopped"

    def forget(self, run: ExecRun) -> None:
        with self._lock:
            runs = self._runs.get(run.box.id, [])
            if run in runs:
                runs.remove(run)

    # -- files ----------------------------------------------------------------------------
    def file_path(self, path: Any) -> str:
        """The normalised sandbox path of an fs path: absolute and under /workspace."""
        if not isinstance(path, str) or not path:
            raise ApiError(422, "path is required")
        if "\0" in path:
            raise ApiError(400, f"path {path!r} contains a NUL byte; no path can hold one", "flat")
        if not path.startswith("/"):
            raise ApiError(400, f"ERR_PATH_OUTSIDE_WORKSPACE: {path} is not an absolute path under {WORKSPACE}", "flat")
        norm = posixpath.normpath(path)
        if norm != WORKSPACE and not norm.startswith(WORKSPACE + "/"):
            raise ApiError(400, f"ERR_PATH_OUTSIDE_WORKSPACE: {path} is outside {WORKSPACE}", "flat")
        return norm

    def files(self, box: Box) -> boxfs.BoxFS:
        """The sandbox's /workspace; symlinks in it are followed the way the sandbox would, never out of it."""
        return boxfs.for_box(self.world, box, ("workspace",))

    def fs_error(self, exc: boxfs.FsError) -> ApiError:
        """A file operation's failure in the shapes the SDK's tests show (never a 500 for a path's problem)."""
        if exc.kind == "outside":
            return ApiError(400, f"ERR_PATH_OUTSIDE_WORKSPACE: {exc.path} leads outside {WORKSPACE}", "flat")
        if exc.kind == "not_found":
            return ApiError(404, "File not found")
        if exc.kind == "is_a_directory":
            return ApiError(400, "Is a directory", "flat")
        if exc.kind == "not_a_directory":
            return ApiError(400, f"Not a directory: a parent of {exc.path} is a file", "flat")
        if exc.kind == "loop":
            return ApiError(400, f"too many levels of symbolic links in {exc.path}", "flat")
        if exc.kind == "not_a_file":
            return ApiError(400, f"Not a regular file: {exc.path}", "flat")
        if exc.kind == "invalid":
            return ApiError(400, f"Invalid path {exc.path}: {exc.detail}", "flat")
        if exc.kind in ("exists", "not_empty"):
            return ApiError(409, f"{exc.kind.replace('_', ' ').capitalize()}: {exc.path}", "flat")
        if exc.kind == "permission":
            return ApiError(403, f"Permission denied: {exc.path}", "flat")
        return ApiError(500, f"File operation failed: {exc}", "flat")
