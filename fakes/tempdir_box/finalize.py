"""Garbage collection hands cleanup() to a daemon thread instead of running it where the collector ran.

BaseEnvironment.__del__ calls cleanup(), which syncs files back under the
host's HERMES_HOME/.sync.lock.  The collector may run a finaliser on a thread
that already holds that lock in a sync_back of another environment; an flock
is not re-entrant, so cleaning up right there would wait forever.  The
finaliser only queues the call (SimpleQueue.put is safe in a finaliser; starting
a thread is not), and a daemon thread started at import runs each one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

_queued: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()


class CleanupLater:
    """Mixin placed before BaseEnvironment: ``__del__`` queues cleanup() for the cleanup thread."""

    def __del__(self) -> None:
        try:
            _queued.put(self.cleanup)  # type: ignore[attr-defined]
        except Exception:
            pass


def _run_queued() -> None:
    while True:
        cleanup = _queued.get()
        try:
            cleanup()
        except Exception:
            pass
        del cleanup


threading.Thread(target=_run_queued, daemon=True, name="tempdir-box-finalize").start()
