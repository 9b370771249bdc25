"""Garbage-collection cleanup that never blocks the thread the collector picked.

Hermes's BaseEnvironment.__del__ calls cleanup().  The collector runs
finalizers on whatever thread happens to allocate at the time: an asyncio
loop, an HTTP server worker, the agent's own turn.  A cleanup that makes a
network call there can stall that thread for a whole request timeout, or
deadlock it when the thread is the one that would answer the call.  So a
finalizer only queues the cleanup for a daemon dispatcher thread.

The finalizer must not start a thread itself: Thread.start() waits for the
new thread to run, which never happens during interpreter shutdown on
Python 3.11 (the process hangs at exit), nor when the collector ran inside
threading's own bookkeeping.  SimpleQueue.put is safe in a finalizer.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Protocol

_pending: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()


class _Cleanable(Protocol):
    def cleanup(self) -> None: ...


class CleanupOffThread:
    """Mixin for a BaseEnvironment subclass: ``__del__`` hands cleanup() to a daemon thread."""

    def __del__(self: _Cleanable) -> None:
        try:
            _pending.put(self.cleanup)
        except Exception:
            pass


def _dispatch() -> None:
    # One thread per cleanup, so a cleanup stuck on the network delays no other.
    while True:
        cleanup = _pending.get()
        try:
            threading.Thread(
                target=_quietly,
                args=(cleanup,),
                daemon=True,
                name=f"{type(getattr(cleanup, '__self__', cleanup)).__name__}-finalize",
            ).start()
        except Exception:  # threads can no longer start: atexit has run cleanup
            return
        del cleanup


def _quietly(cleanup: Callable[[], None]) -> None:
    try:
        cleanup()
    except Exception:
        pass


threading.Thread(target=_dispatch, daemon=True, name="reference-finalize").start()
