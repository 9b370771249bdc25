"""Garbage-collection cleanup that never blocks the thread the collector picked.

Hermes's BaseEnvironment.__del__ calls cleanup().  The collector runs
finalizers on whatever thread happens to allocate at the time: an asyncio
loop, an HTTP server worker, the agent's own turn.  A cleanup that makes a
network call there can stall that thread for a whole request timeout, or
deadlock it when the thread is the one that would answer the call.  So a
finalizer only starts a daemon thread that does the cleanup.
"""

from __future__ import annotations

import threading
from typing import Any


class CleanupOffThread:
    """Mixin for a BaseEnvironment subclass: ``__del__`` hands cleanup() to a daemon thread."""

    def __del__(self) -> None:
        try:
            cleanup: Any = self.cleanup  # type: ignore[attr-defined]
            threading.Thread(target=_quietly, args=(cleanup,), daemon=True,
                             name=f"{type(self).__name__}-finalize").start()
        except Exception:  # interpreter shutdown: threads can no longer start; atexit has run cleanup
            pass


def _quietly(cleanup: Any) -> None:
    try:
        cleanup()
    except Exception:
        pass
