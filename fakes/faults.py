"""Scripted faults shared by every fake server.

A test (or the conformance suite, through a fake's world) arms a fault; the
server consults ``Faults.take(route, box_id)`` when a request or session
starts and applies what it gets.  A fault matches a route (``"POST
/v2/box"``, ``"WS exec-session"``, ...; None matches every route) and
optionally one box, and fires ``times`` times (-1: until cleared).

Kinds:
- ``status``: answer with ``status`` and the vendor's error body (``message``);
- ``latency``: sleep ``delay_s`` before handling the request normally;
- ``drop``: close the connection after ``after_bytes`` bytes of output
  (WebSocket: close without an exit frame; HTTP stream: cut the body);
- ``half-close``: stop sending but keep the connection open and reading;
- ``silence``: accept the request and never answer;
- ``garbage``: send a malformed frame or line, then carry on (``payload``);
- ``truncate``: send the first half of a frame/line and close;
- ``flood``: make the command's output ``flood_bytes`` long.
Box states (paused, deleted, error behind the client's back) are not faults
here: they are World.set_state / pause / delete calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

KINDS = ("status", "latency", "drop", "half-close", "silence", "garbage", "truncate", "flood")


@dataclass
class Fault:
    kind: str
    route: str | None = None
    box: str | None = None
    times: int = 1
    status: int = 500
    message: str = "injected fault"
    delay_s: float = 0.0
    after_bytes: int = 0
    payload: str = "}{ not json"
    flood_bytes: int = 256 * 1024 * 1024
    fired: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {', '.join(KINDS)}")

    def matches(self, route: str, box: str | None) -> bool:
        return (self.route is None or self.route == route) and (self.box is None or self.box == box)


class Faults:
    """The armed faults of one fake service; thread-safe."""

    def __init__(self) -> None:
        self._armed: list[Fault] = []
        self._lock = threading.Lock()
        self.log: list[tuple[str, str | None, str]] = []  # (route, box, kind) of every fired fault
        self.fired_at: list[tuple[float, str]] = []  # (monotonic time, route): how fast a client came back

    def arm(self, fault: Fault) -> Fault:
        with self._lock:
            self._armed.append(fault)
        return fault

    def clear(self) -> None:
        with self._lock:
            self._armed.clear()

    def remove(self, which: Callable[[Fault], bool]) -> None:
        with self._lock:
            self._armed = [f for f in self._armed if not which(f)]

    def take(self, route: str, box: str | None = None) -> Fault | None:
        """The first armed fault for this request, consuming one of its firings."""
        with self._lock:
            for fault in self._armed:
                if fault.matches(route, box):
                    fault.fired += 1
                    if fault.times >= 0 and fault.fired >= fault.times:
                        self._armed.remove(fault)
                    self.log.append((route, box, fault.kind))
                    self.fired_at.append((time.monotonic(), route))
                    return fault
        return None
