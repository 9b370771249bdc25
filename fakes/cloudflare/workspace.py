"""Workspaces: the Durable Object's state and its container, over the shared box world.

A ``Workspace`` holds what the Worker keeps in Durable Object storage (config,
``booted``, the snapshot record, the last activity, the last 64 exec and
cancelled request ids) and what it keeps in memory (the active operation, the
lifecycle flag).  Its container is a ``fakes.world`` box whose id is the
sandbox id: starting the container creates the box (from the named image or
from the snapshot), stopping it deletes the box, and a snapshot is a copy of
the box's directories (home, workspace and /tmp: Cloudflare snapshots the
whole container filesystem, never its processes).

Lock order: a workspace's ``lock`` is held only for short state changes; file
copies and deletions run outside it while the workspace is reserved.  Copies
in and out of a box go through fakes.boxfs: never through the box's symlinks,
and what lands in a box belongs to the box's owner.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fakes import box_paths, boxfs
from fakes.world import Box, BoxProcess, World

from .protocol import ApiError, ExecRequest, WorkspaceConfig
from .settings import REPLAY_MEMORY, Settings

if TYPE_CHECKING:
    from .bridge import Bridge

logger = logging.getLogger("fakes.cloudflare")

# Merge stderr into stdout before bash starts, as the Worker's "combined" stream
# does, without touching the user's command.
_MERGED_BASH = 'exec 2>&1 /bin/bash "$@"'


@dataclass
class Snapshot:
    path: Path
    saved_at: int  # ms since the epoch, as snapshot_saved_at reports it


@dataclass
class Active:
    """The one foreground operation of a workspace (an exec, or "read")."""

    id: str
    cancelled: bool = False
    signal: int = 0  # forwarded to the supervisor (SIGTERM from cancel or disconnect)


class Workspace:
    def __init__(self, bridge: Bridge, sandbox_id: str):
        self.bridge = bridge
        self.id = sandbox_id
        self.lock = threading.RLock()
        # Durable Object storage
        self.config: WorkspaceConfig | None = None
        self.booted = False
        self.snapshot: Snapshot | None = None
        self.last_activity = 0.0
        self.recent: deque[str] = deque(maxlen=REPLAY_MEMORY)
        self.cancelled: deque[str] = deque(maxlen=REPLAY_MEMORY)
        # memory and the container
        self.box: Box | None = None
        self.generation = 0  # bumped whenever a container starts or stops
        self.active: Active | None = None
        # concurrent-exec: execs that share the workspace, by request id (never with ``active``)
        self.shared: dict[str, Active] = {}
        self.lifecycle_busy = False
        self._starting = threading.Lock()  # one container start at a time, for concurrent cold starts
        self.forgotten = False  # had a config, then all state was deleted
        self._alarm: threading.Timer | None = None
        self._snapshots = 0
        # harness hooks
        self.stalled = False  # the supervisor ignores its timeout and signals (a wedged hermes-exec)
        self.fail_snapshots = False  # snapshots fail with snapshot_failed
        self.credentials: set[str] = set()  # digests of tokens that reached this workspace

    @property
    def settings(self) -> Settings:
        return self.bridge.settings

    @property
    def world(self) -> World:
        return self.bridge.world

    @property
    def running(self) -> bool:
        return self.box is not None

    # -- alarm ------------------------------------------------------------------------
    def set_alarm(self, delay_s: float) -> None:
        with self.lock:
            self.delete_alarm()
            if self.bridge.closing.is_set():
                return
            timer = threading.Timer(max(0.0, delay_s), self.alarm)
            timer.daemon = True
            timer.name = f"cf-alarm-{self.id}"
            self._alarm = timer
            timer.start()

    def delete_alarm(self) -> None:
        with self.lock:
            if self._alarm is not None:
                self._alarm.cancel()
                self._alarm = None

    def touch(self) -> None:
        with self.lock:
            self.last_activity = time.monotonic()
            self.set_alarm(self.settings.idle_s)

    def alarm(self) -> None:
        """The idle alarm: snapshot and stop (persistent) or forget (ephemeral) an idle workspace."""
        with self.lock:
            if self.busy:
                self.set_alarm(self.settings.alarm_retry_s)
                return
            if self.config is None:
                return
            idle = time.monotonic() - self.last_activity
            if idle < self.settings.idle_s:
                self.set_alarm(self.settings.idle_s - idle)
                return
        try:
            with self.exclusive():
                self.release()
        except ApiError:
            pass  # release re-armed the alarm if a retry can help
        except Exception:
            logger.exception("idle alarm of %s failed", self.id)

    # -- exclusivity ----------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return bool(self.active or self.lifecycle_busy or self.shared)

    def assert_idle(self) -> None:
        if self.busy:
            raise ApiError(409, "workspace_busy", "Workspace is busy")

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self.lock:
            self.assert_idle()
            self.lifecycle_busy = True
        try:
            yield
        finally:
            with self.lock:
                self.lifecycle_busy = False

    def reserve(self, operation_id: str) -> Active:
        """Take the foreground slot synchronously, before any slow step."""
        with self.lock:
            self.assert_idle()
            self.active = Active(operation_id)
            return self.active

    def reserve_shared(self, operation_id: str) -> Active:
        """concurrent-exec: join the other shared execs unless an exclusive operation runs or the cap is reached."""
        with self.lock:
            if self.active or self.lifecycle_busy or len(self.shared) >= self.settings.max_concurrent_execs:
                raise ApiError(409, "workspace_busy", "Workspace is busy")
            active = self.shared[operation_id] = Active(operation_id)
            return active

    def _drop(self, active: Active) -> None:
        if self.active is active:
            self.active = None
        if self.shared.get(active.id) is active:
            del self.shared[active.id]

    def finish(self, active: Active) -> None:
        with self.lock:
            self._drop(active)
            if self.config is not None:
                self.touch()

    def require_config(self) -> WorkspaceConfig:
        if self.config is None:
            raise ApiError(404, "workspace_missing", "Initialize the workspace first")
        return self.config

    # -- actions ----------------------------------------------------------------------------
    def init(self, config: WorkspaceConfig) -> dict[str, Any]:
        with self.exclusive():
            if config.image not in self.settings.images:
                raise ApiError(400, "image_not_found", "Named image was not deployed")
            with self.lock:
                if self.config is not None and self.config != config:
                    raise ApiError(
                        409, "config_conflict", "Existing workspace has different settings; use a new identity"
                    )
                if self.config is None:
                    self.config = config
                    self.forgotten = False
                self.touch()
                return {"ok": True, "running": self.running}

    def status(self) -> dict[str, Any]:
        with self.lock:
            config = self.require_config()
            return {
                "config": config.as_json(),
                "running": self.running,
                "busy": self.busy,
                "snapshot_saved_at": self.snapshot.saved_at if self.snapshot else None,
            }

    def begin_exec(self, request: ExecRequest) -> tuple[Active, WorkspaceConfig]:
        """The checks the Worker answers as HTTP errors before the stream starts."""
        active = (self.reserve_shared if request.concurrent else self.reserve)(request.request_id)
        try:
            with self.lock:
                config = self.require_config()
                if request.request_id in self.recent:
                    raise ApiError(409, "duplicate_request", "Do not replay an exec request")
                if request.request_id in self.cancelled:
                    raise ApiError(409, "command_cancelled", "Command was cancelled before execution")
                self.recent.append(request.request_id)
                self.touch()
        except BaseException:
            with self.lock:
                self._drop(active)
            raise
        return active, config

    def cancel(self, request_id: str) -> None:
        with self.lock:
            if request_id not in self.cancelled:
                self.cancelled.append(request_id)
            for active in (self.active, self.shared.get(request_id)):
                if active is not None and active.id == request_id:
                    active.cancelled = True
                    active.signal = signal.SIGTERM

    def checkpoint(self) -> None:
        with self.exclusive():
            config = self.require_config()
            if not config.persistent:
                raise ApiError(409, "not_persistent", "Workspace is ephemeral")
            self.save()
            self.touch()

    def reset(self) -> None:
        with self.exclusive():
            self.destroy()
            self.delete_alarm()
            self.forget_all()

    def release(self) -> None:
        """Persistent: snapshot, then stop.  Ephemeral: stop and forget.  Caller holds exclusive()."""
        config = self.config
        if config is None:
            return
        try:
            if config.persistent:
                self.save()
                self.destroy()
                self.delete_alarm()
            else:
                self.destroy()
                self.delete_alarm()
                self.forget_all()
        except Exception:
            if not self.running:
                self.delete_alarm()  # nothing left to save; retrying would never end
            else:
                self.set_alarm(self.settings.alarm_retry_s)  # keep the live files, try again later
            raise

    # -- container ----------------------------------------------------------------------------
    def save(self) -> None:
        """Snapshot the running container; the record is stored before anything is stopped."""
        with self.lock:
            box = self.box
            if box is None:
                if self.snapshot is None and self.booted:
                    raise ApiError(409, "workspace_lost", "Container stopped without a checkpoint")
                return
            if self.fail_snapshots:
                raise ApiError(503, "snapshot_failed", "Snapshot failed")
            self._snapshots += 1
            dest = self.bridge.snapshots_root / f"{self.id}.{self._snapshots}"
        try:
            boxfs.copy_tree(box.dir, dest, *boxfs.box_owner(self.world))
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
        with self.lock:
            old, self.snapshot = self.snapshot, Snapshot(dest, int(time.time() * 1000))
        if old is not None:
            shutil.rmtree(old.path, ignore_errors=True)

    def destroy(self) -> None:
        """Stop the container: its processes die and its live files go."""
        with self.lock:
            box, self.box = self.box, None
            if box is not None:
                self.generation += 1
        if box is not None:
            self.world.delete(box)

    def forget_all(self) -> None:
        """Delete all Durable Object storage (the snapshot handle too)."""
        with self.lock:
            if self.config is not None:
                self.forgotten = True
            self.config = None
            self.booted = False
            old, self.snapshot = self.snapshot, None
            self.recent.clear()
            self.cancelled.clear()
        if old is not None:
            shutil.rmtree(old.path, ignore_errors=True)

    def ensure_running(self, config: WorkspaceConfig) -> tuple[Box, int]:
        """Start the container if needed (restoring the snapshot), wait out the boot, make the cwd."""
        with self._starting:  # shared execs may cold-start together: one start, the others wait for it
            return self._ensure_running(config)

    def _ensure_running(self, config: WorkspaceConfig) -> tuple[Box, int]:
        with self.lock:
            box, generation = self.box, self.generation
            snapshot = self.snapshot
            if box is None:
                if self.booted and snapshot is None:
                    # Never replace a lost filesystem with an empty one.
                    raise ApiError(
                        409, "workspace_lost", "No checkpoint exists for the stopped workspace; use a new identity"
                    )
                if snapshot is None and config.image not in self.settings.images:
                    raise ApiError(400, "image_not_found", "Named image is unavailable")
        if box is None:
            box = self.world.create(box_id=self.id, meta={"instance": config.instance, "image": config.image})
            if snapshot is not None:
                boxfs.copy_tree(snapshot.path, box.dir, *boxfs.box_owner(self.world))
            else:
                self._seed(box, self.settings.images.get(config.image))
            with self.lock:
                if self.box is not None:  # another start won; keep it
                    self.world.delete(box)
                    box = self.box
                else:
                    self.box, self.booted = box, True
                    self.generation += 1
                generation = self.generation
            self._boot_delay()
        self._make_cwd(box, config.cwd)
        return box, generation

    def _seed(self, box: Box, image: Path | None) -> None:
        boxfs.for_box(self.world, box, ("home",)).makedirs(f"{self.world.layout.home}/.hermes")
        if image is not None:
            for part, target in (("home", box.home_dir), ("workspace", box.workspace_dir)):
                if (image / part).is_dir():
                    boxfs.copy_tree(image / part, target, *boxfs.box_owner(self.world))

    def _boot_delay(self) -> None:
        delay, limit = self.settings.startup_delay_s, self.settings.startup_timeout_s
        if delay <= 0:
            return
        self.bridge.closing.wait(min(delay, limit))
        if delay > limit:
            raise ApiError(503, "startup_timeout", "Container did not become ready")

    def _make_cwd(self, box: Box, cwd: str) -> None:
        """``mkdir -p`` of the cwd inside the container, as the Worker does on every start.

        Resolved in the box, never on this machine (fakes.box_paths): home, workspace and /tmp are made
        through boxfs (never through a symlink out of the box); any other path is made by the box itself,
        whose root and system directories are read-only.  The fake's image has no /root: the container
        user is ``hermes`` with its home at /home/hermes, and a base image's /root is root's own (0700),
        no directory that user could start a command in.  So ``cwd=/root``, like any directory the
        container cannot make, is ``invalid_cwd`` and no command runs.
        """
        try:
            box_paths.make_dirs(self.world, box, cwd)
        except box_paths.NotInBox:
            raise ApiError(400, "invalid_cwd", "Working directory is not writable")

    def launch(self, box: Box, request: ExecRequest, config: WorkspaceConfig) -> BoxProcess:
        """Start ``bash -c|-lc command`` in its own process group, stderr merged into stdout."""
        argv = ["/bin/sh", "-c", _MERGED_BASH, "hermes-exec", "-lc" if request.login else "-c", request.command]
        try:
            return self.world.spawn(box, argv=argv, cwd=config.cwd)
        except box_paths.NotInBox:  # a command removed the cwd after it was made
            raise ApiError(400, "invalid_cwd", "Working directory is missing")

    def lost(self, generation: int) -> bool:
        with self.lock:
            return self.box is None or self.generation != generation

    # -- harness view -----------------------------------------------------------------------
    def world_state(self) -> str | None:
        with self.lock:
            if self.config is None:
                return "deleted" if self.forgotten else None
            if self.running:
                return "running"
            if self.snapshot is not None:
                return "paused"
            return "error" if self.booted else "idle"

    def crash(self) -> None:
        """The container dies; a snapshot, if any, survives."""
        self.destroy()

    def lose(self) -> None:
        """The container dies and no snapshot exists: workspace_lost from now on."""
        self.destroy()
        with self.lock:
            old, self.snapshot, self.booted = self.snapshot, None, True
        if old is not None:
            shutil.rmtree(old.path, ignore_errors=True)

    def pause(self) -> None:
        """Snapshot and stop behind the client's back (the idle alarm, without its checks)."""
        with self.lock:
            if self.box is None:
                return
            failing, self.fail_snapshots = self.fail_snapshots, False
        try:
            self.save()
        finally:
            with self.lock:
                self.fail_snapshots = failing
        self.destroy()

    def forget(self) -> None:
        """Everything gone, as after DELETE."""
        self.destroy()
        self.delete_alarm()
        self.forget_all()
