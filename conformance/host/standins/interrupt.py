"""Stand-in for ``tools.interrupt``: per-thread interrupt flags.

The agent sets the flag on the thread that called the tool.  Current hosts
wait for a command on a worker thread, so the wait loop asks about the
caller's thread by id (``is_thread_interrupted``) as well as its own.
"""

from __future__ import annotations

import threading

_interrupted: set[int] = set()
_lock = threading.Lock()


def set_interrupt(active: bool, thread_id: int | None = None) -> None:
    tid = thread_id if thread_id is not None else threading.get_ident()
    with _lock:
        if active:
            _interrupted.add(tid)
        else:
            _interrupted.discard(tid)


def is_interrupted() -> bool:
    return is_thread_interrupted(threading.get_ident())


def is_thread_interrupted(thread_id: int | None) -> bool:
    """Whether ``thread_id`` has its flag set; ``None`` never has."""
    if thread_id is None:
        return False
    with _lock:
        return thread_id in _interrupted


def clear_current_thread_interrupt() -> None:
    set_interrupt(False)


class _ThreadEvent:
    """The legacy ``_interrupt_event`` API mapped onto the current thread's flag."""

    def is_set(self) -> bool:
        return is_interrupted()

    def set(self) -> None:
        set_interrupt(True)

    def clear(self) -> None:
        set_interrupt(False)

    def wait(self, timeout: float | None = None) -> bool:
        return is_interrupted()


_interrupt_event = _ThreadEvent()
