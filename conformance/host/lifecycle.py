"""How Hermes keeps, reaps and tears down environments.

- One environment per task id, created under a per-task lock and shared by
  every caller; a failed creation is never cached.
- Per-turn teardown: cleanup_vm(task_id) after every turn unless the
  environment is persistent (_persistent or _session_scoped truthy).
- An idle reaper thread tears down environments idle longer than the lifetime.
- At exit: kill in-flight foreground commands, then cleanup_vm (cleanup with
  force_remove=False) on every environment, and only then wait_for_cleanup(15)
  on each environment that has it, swallowing errors.

cleanup() gets force_remove only when its signature declares the keyword (the
host inspects it): False from cleanup_vm (turn and session teardown, atexit),
True from the prompt probe and a user's teardown, nothing from the idle reaper.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

logger = logging.getLogger("tools.terminal_tool_lifecycle")


def is_persistent_env(env: Any) -> bool:
    return bool(getattr(env, "_persistent", False) or getattr(env, "_session_scoped", False))


def cleanup_env(env: Any, *, force_remove: bool | None = None) -> None:
    """Call cleanup the way _cleanup_env does: force_remove only if accepted."""
    cleanup = getattr(env, "cleanup", None)
    if callable(cleanup):
        if force_remove is not None:
            params: Mapping[str, inspect.Parameter]
            try:
                params = inspect.signature(cleanup).parameters
            except (TypeError, ValueError):
                params = {}
            if "force_remove" in params:
                cleanup(force_remove=force_remove)
                return
        cleanup()
        return
    for name in ("stop", "terminate"):
        fallback = getattr(env, name, None)
        if callable(fallback):
            fallback()
            return


class EnvCache:
    """The host's _active_environments table for one provider."""

    def __init__(self, factory: Callable[[str], Any]):
        self._factory = factory
        self._envs: dict[str, Any] = {}
        self._last_activity: dict[str, float] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._table_lock = threading.Lock()
        self._reaper: threading.Thread | None = None
        self._stop = threading.Event()
        self.reaped: list[str] = []
        self.errors: list[BaseException] = []

    def acquire(self, task_id: str) -> Any:
        with self._table_lock:
            lock = self._locks.setdefault(task_id, threading.Lock())
        with lock:
            env = self._envs.get(task_id)
            if env is None:
                env = self._factory(task_id)  # raising leaves nothing cached
                self._envs[task_id] = env
            self._last_activity[task_id] = time.monotonic()
            return env

    def get(self, task_id: str) -> Any | None:
        return self._envs.get(task_id)

    def touch(self, task_id: str) -> None:
        self._last_activity[task_id] = time.monotonic()

    def cleanup_vm(self, task_id: str) -> None:
        with self._table_lock:
            env = self._envs.pop(task_id, None)
            self._last_activity.pop(task_id, None)
        if env is not None:
            cleanup_env(env, force_remove=False)

    def end_turn(self, task_id: str) -> bool:
        """Per-turn teardown; returns True if the environment was cleaned up."""
        env = self._envs.get(task_id)
        if env is None or is_persistent_env(env):
            return False
        self.cleanup_vm(task_id)
        return True

    def reap_idle(self, lifetime_s: float) -> list[str]:
        now = time.monotonic()
        with self._table_lock:
            stale = [t for t, seen in self._last_activity.items() if now - seen > lifetime_s]
            victims = [(t, self._envs.pop(t)) for t in stale if t in self._envs]
            for t in stale:
                self._last_activity.pop(t, None)
        for task_id, env in victims:  # cleanup outside the lock, as the host does
            try:
                cleanup_env(env)
            except Exception as exc:
                self.errors.append(exc)
                logger.info("idle cleanup of %s failed: %s", task_id, exc)
            self.reaped.append(task_id)
        return [t for t, _ in victims]

    def start_reaper(self, *, interval_s: float, lifetime_s: float) -> None:
        def loop() -> None:
            while not self._stop.wait(interval_s):
                self.reap_idle(lifetime_s)

        self._reaper = threading.Thread(target=loop, daemon=True, name="hermes-idle-reaper")
        self._reaper.start()

    def stop_reaper(self) -> None:
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(5)

    def shutdown(self, timeout: float = 15.0, kill_foreground: Callable[[], None] | None = None) -> None:
        """The atexit path: stop the reaper and foreground work, cleanup_vm every environment,
        then wait_for_cleanup(timeout) on each of them (the environments were listed first)."""
        self.stop_reaper()
        with self._table_lock:
            envs = list(self._envs.values())
        if kill_foreground is not None:
            try:
                kill_foreground()
            except Exception as exc:
                self.errors.append(exc)
        for task_id in list(self._envs):
            try:
                self.cleanup_vm(task_id)
            except Exception as exc:
                self.errors.append(exc)
        for env in envs:
            waiter = getattr(env, "wait_for_cleanup", None)
            if waiter is None:
                continue
            try:
                waiter(timeout=timeout)
            except Exception as exc:
                self.errors.append(exc)
