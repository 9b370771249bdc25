"""Limits, timings and operator settings of the Cloudflare bridge fake.

The limits are bridge protocol v1's and are not configurable.  Every timing is
configurable so tests run fast; the defaults are the public Worker's
(research/vendors.md 2.4, 2.5, 2.9), and ``Settings.quick()`` gives the short
intervals the conformance fake uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = 1
ENDPOINT_VAR = "HERMES_CF_ENDPOINT"  # the plugin's variables
TOKEN_VAR = "HERMES_CF_TOKEN"

MAX_BODY_BYTES = 1_048_576
MAX_COMMAND_BYTES = 65_536
MAX_STDIN_BYTES = 786_432
MAX_OUTPUT_UNITS = 2_000_000  # UTF-16 code units, as the Worker counts them
MAX_FRAME_UNITS = 4096  # per output event, never splitting a surrogate pair
MAX_TIMEOUT_S = 900.0
MIN_TIMEOUT_S = 0.1
DEFAULT_TIMEOUT_S = 120.0
MAX_READ_BYTES = 1024**3
MAX_AUTH_HEADER = 4096
MAX_PATH_BYTES = 4096
MAX_JSON_DEPTH = 64  # a stated fake limit: the Worker's JSON.parse has only the engine's stack
REPLAY_MEMORY = 64  # exec ids and cancelled ids remembered per workspace

INSTANCE_TYPES = ("lite", "standard-1", "standard-2", "standard-3", "standard-4")

# Protocol extensions (backward compatible, negotiated through /health; see
# reference/cloudflare_sandbox/README.md).  A Worker without them is plain v1.
EXT_CONCURRENT_EXEC = "concurrent-exec"  # exec "concurrent": true shares the workspace with other such execs
EXT_LARGE_OUTPUT = "large-output"  # exec "max_output": N raises the output limit up to large_output_units
EXTENSIONS = (EXT_CONCURRENT_EXEC, EXT_LARGE_OUTPUT)

# Fault route names: what Faults.take(route, sandbox_id) is asked with.  A request
# whose path matches no route is asked as "<METHOD> <raw path>" with no sandbox.
ROUTE_HEALTH = "GET /health"
ROUTE_INIT = "POST /v1/sandboxes/{id}"
ROUTE_STATUS = "GET /v1/sandboxes/{id}"
ROUTE_RESET = "DELETE /v1/sandboxes/{id}"
ROUTE_EXEC = "POST /v1/sandboxes/{id}/exec"
ROUTE_READ = "POST /v1/sandboxes/{id}/read"
ROUTE_RELEASE = "POST /v1/sandboxes/{id}/release"
ROUTE_CHECKPOINT = "POST /v1/sandboxes/{id}/checkpoint"
ROUTE_CANCEL = "POST /v1/sandboxes/{id}/cancel/{request_id}"
ROUTES = (
    ROUTE_HEALTH,
    ROUTE_INIT,
    ROUTE_STATUS,
    ROUTE_RESET,
    ROUTE_EXEC,
    ROUTE_READ,
    ROUTE_RELEASE,
    ROUTE_CHECKPOINT,
    ROUTE_CANCEL,
)


@dataclass(frozen=True)
class Settings:
    # Named images: name -> None (an empty /workspace and a home with .hermes, like
    # the repository's Dockerfile) or a directory whose home/ and workspace/ seed a
    # cold start.  An init naming another image gets image_not_found.
    images: Mapping[str, Path | None] = field(default_factory=lambda: {"hermes": None})
    default_instance: str = "standard-1"
    # The Worker's default when ALLOWED_INSTANCE_TYPES is unset.
    allowed_instances: tuple[str, ...] = ("lite", "standard-1")

    heartbeat_s: float = 10.0
    idle_s: float = 600.0  # IDLE_SECONDS: the idle alarm snapshots and stops the container
    alarm_retry_s: float = 60.0  # re-arm delay while busy, or after a failed snapshot
    kill_grace_s: float = 2.0  # SIGTERM -> SIGKILL escalation of the supervisor
    drain_idle_s: float = 0.3  # background output after exit: stop after this quiet gap
    drain_grace_s: float = 5.0  # ... and after this long in any case
    hard_deadline_grace_s: float = 15.0  # hard_timeout comes this long after the timeout
    failure_grace_s: float = 5.0  # after a failure, wait this long for the group before killing it by id
    startup_delay_s: float = 0.0  # simulated cold start (boot or restore) before the command
    startup_timeout_s: float = 60.0  # a cold start slower than this ends as startup_timeout
    read_timeout_s: float = 600.0  # /read holds the workspace at most this long
    poll_s: float = 0.05  # supervisor loop tick (signals, deadlines, container loss)

    # Extensions this Worker offers; none by default, as the public v1 Worker.
    extensions: tuple[str, ...] = ()
    max_concurrent_execs: int = 16  # concurrent-exec: shared execs per workspace, then workspace_busy
    large_output_units: int = 1 << 30  # large-output: the highest max_output a request may ask for

    def __post_init__(self) -> None:
        unknown = [i for i in self.allowed_instances if i not in INSTANCE_TYPES]
        if unknown:
            raise ValueError(f"unknown instance types {unknown}; known: {', '.join(INSTANCE_TYPES)}")
        strange = [e for e in self.extensions if e not in EXTENSIONS]
        if strange:
            raise ValueError(f"unknown extensions {strange}; known: {', '.join(EXTENSIONS)}")
        if self.max_concurrent_execs < 1 or self.large_output_units < MAX_OUTPUT_UNITS:
            raise ValueError("max_concurrent_execs must be >= 1 and large_output_units >= the v1 output limit")
        for name in ("heartbeat_s", "idle_s", "alarm_retry_s", "poll_s", "startup_timeout_s", "read_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")

    @classmethod
    def quick(cls, **overrides: Any) -> Settings:
        """Short intervals for the conformance suite and tests; kill and drain timings
        stay the Worker's because checks measure them."""
        base = cls(heartbeat_s=1.0, idle_s=30.0, alarm_retry_s=5.0, hard_deadline_grace_s=8.0)
        return replace(base, **overrides)

    def health(self) -> dict[str, object]:
        """The /health body: v1's, plus the offered extensions and their limits when there are any."""
        body: dict[str, object] = {"ok": True, "protocol": PROTOCOL_VERSION}
        if self.extensions:
            body["extensions"] = list(self.extensions)
            limits: dict[str, int] = {}
            if EXT_CONCURRENT_EXEC in self.extensions:
                limits["concurrent_execs"] = self.max_concurrent_execs
            if EXT_LARGE_OUTPUT in self.extensions:
                limits["max_output"] = self.large_output_units
            body["limits"] = limits
        return body
