"""How Box Lite's operations take HUP, INT and TERM: the work stops, cleans up what it made, and the
command exits 128+N.

- ``Interrupts``, around an operation (on the main thread; elsewhere it changes nothing): the first of
  those signals raises ``BoxInterrupted`` wherever the work is; later ones, and any that arrive once
  ``settled`` is set (the work is done, or its cleanup has begun), are only noted, so a cleanup runs
  to its end.  ``deliver_late()``, after the block, delivers a noted signal that interrupted nothing
  to the handlers the caller had (the command then exits 128+N, with the work done).
- ``Held``: the signals are blocked while held, around a step that must not be cut in two (freezing
  or thawing a box); one that arrived meanwhile is delivered on release.
- ``raise_interrupted``: the handler the command line installs for the whole command.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, NoReturn

from reference.box_lite.errors import BoxInterrupted

WATCHED = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)


def raise_interrupted(signum: int, _frame: FrameType | None) -> NoReturn:
    raise BoxInterrupted(signum)


class Interrupts:
    """HUP, INT and TERM raise BoxInterrupted once for the block (see the module docstring)."""

    def __init__(self) -> None:
        self.settled = False
        self.received: list[int] = []
        self._raised = False
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signum)
        if not (self.settled or self._raised):
            self._raised = True
            raise BoxInterrupted(signum)

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in WATCHED:
                self._previous[signum] = signal.signal(signum, self._handler)
        return self

    def __exit__(self, *_: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)

    def deliver_late(self) -> None:
        """Deliver a signal that came once the work was settled (and so interrupted nothing)."""
        if self.received and not self._raised and self._previous:
            signal.raise_signal(self.received[0])


class Held:
    """HUP, INT and TERM blocked while held; one that arrived meanwhile is delivered on release."""

    def __init__(self) -> None:
        self._previous: set[int | signal.Signals] | None = None

    def hold(self) -> None:
        if self._previous is None:
            self._previous = signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)

    def release(self) -> None:
        if self._previous is not None:
            previous, self._previous = self._previous, None
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
