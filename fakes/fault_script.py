"""Transport faults in the kit's vocabulary: armed by role, not by vendor route.

Checks are written once for every backend, so they cannot name "POST
/v2/box" or "POST /v1/sandboxes/{id}/exec".  Each fake's world maps the
roles a check needs onto its own routes:

- ``create``: the call that makes a sandbox (not idempotent);
- ``exec``: the call or session that carries a command and its output (not
  idempotent: a command that may have run must not be sent again);
- ``read``: idempotent reads a backend makes while creating and running
  (state, info); a client may retry these.

A world offering this adds ``transport-faults`` to its capabilities.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fakes.faults import KINDS, Fault, Faults

ROLES = ("create", "exec", "read")


@dataclass
class Armed:
    """The faults one ``arm`` call armed (one per route of the role), and when each fired."""

    role: str
    faults: list[Fault] = field(default_factory=list)

    @property
    def fired(self) -> int:
        return sum(f.fired for f in self.faults)


class FaultScript:
    """Arms and clears faults of one fake service by role; records when each request met one."""

    def __init__(self, faults: Faults, routes: Mapping[str, tuple[str, ...]]):
        unknown = set(routes) - set(ROLES)
        if unknown:
            raise ValueError(f"unknown fault role(s) {sorted(unknown)}; roles are {', '.join(ROLES)}")
        self._faults = faults
        self.routes = dict(routes)
        self._armed: list[Armed] = []
        self._lock = threading.Lock()

    def arm(self, kind: str, role: str, *, sandbox: str | None = None, times: int = 1, **params: Any) -> Armed:
        """Arm ``kind`` on every route of ``role`` (``times`` firings each; -1: until cleared)."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; one of {', '.join(KINDS)}")
        if role not in self.routes:
            raise ValueError(f"this fake has no {role!r} routes; it has {', '.join(self.routes)}")
        armed = Armed(role)
        for route in self.routes[role]:
            armed.faults.append(self._faults.arm(Fault(kind, route=route, box=sandbox, times=times, **params)))
        with self._lock:
            self._armed.append(armed)
        return armed

    def clear(self) -> None:
        """Disarm everything armed here (faults armed by others stay)."""
        with self._lock:
            armed, self._armed = self._armed, []
        mine = {id(f) for a in armed for f in a.faults}
        self._faults.remove(lambda f: id(f) in mine)

    def landed(self, armed: Armed) -> str | None:
        """Where a fault the injector applies blind met the backend (which connection), for messages;
        None where the fault met a request the injector read, as a fake's always does."""
        return None

    def why_unfired(self, armed: Armed) -> str:
        """Why an armed fault that never fired met nothing."""
        return f"no request of this backend reached the run's {armed.role!r} routes"

    def before_command(self, armed: Armed) -> str | None:
        """Why a fault that fired may have met the backend before its command started, when the
        injector cannot see where a command starts; None when it can (a fake applies a command's
        fault once the command started)."""
        return None

    def attempts(self, role: str, *, since: float = 0.0) -> list[float]:
        """Monotonic times (from ``since`` on) of the requests on ``role``'s routes that met a fault, oldest first."""
        routes = set(self.routes.get(role, ()))
        return [t for t, route in self._faults.fired_at if route in routes and t >= since]
