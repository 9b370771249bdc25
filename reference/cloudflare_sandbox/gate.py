"""Who may use a workspace at once, on this side of the wire.

Protocol v1 runs one foreground operation per workspace and answers any
other with 409 workspace_busy.  Hermes runs execute() calls concurrently, so
the client queues them itself instead of collecting 409s: against a plain v1
Worker every exec is exclusive; with the concurrent-exec extension execs
share the workspace up to the Worker's advertised limit.  Lifecycle calls
(release, delete) are always exclusive.  Gates are per workspace and shared
by every environment of this process that uses it (HERMES_CF_WORKSPACE).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

_GATES: dict[tuple[str, str], Gate] = {}
_GATES_LOCK = threading.Lock()
_TICK_S = 0.1


class Gate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._exclusive = False
        self._shared = 0

    def enter(self, *, shared: bool, limit: int, deadline: float, stop: Callable[[], bool]) -> bool:
        """Wait for a place; False when ``stop()`` turns true or the deadline passes first."""
        with self._cond:
            while not self._free(shared, limit):
                if stop() or time.monotonic() >= deadline:
                    return False
                self._cond.wait(min(_TICK_S, max(0.0, deadline - time.monotonic())))
            if shared:
                self._shared += 1
            else:
                self._exclusive = True
            return True

    def _free(self, shared: bool, limit: int) -> bool:
        if shared:
            return not self._exclusive and self._shared < limit
        return not self._exclusive and self._shared == 0

    def leave(self, *, shared: bool) -> None:
        with self._cond:
            if shared:
                self._shared = max(0, self._shared - 1)
            else:
                self._exclusive = False
            self._cond.notify_all()


def gate_for(endpoint: str, workspace_id: str) -> Gate:
    with _GATES_LOCK:
        gate = _GATES.get((endpoint, workspace_id))
        if gate is None:
            gate = _GATES[(endpoint, workspace_id)] = Gate()
        return gate
