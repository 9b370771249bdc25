"""Limits, timings and the choices the DeepInfra fake makes where the research is silent.

Documented by the SDK, its tests or the plugin (research/vendors.md 3.x):
bearer auth, both error body shapes, the state names, 5 active sandboxes per
account (429), 409 for exec or fs on a sandbox that is not running, the NDJSON
exec stream, the 30-minute command cap, fs only under /workspace, 100 MiB per
fs call.  Everything marked "Guess" below is a choice, named so a test can
flip it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fakes.world import PathLayout

MIB = 1024 * 1024
KEY_VAR = "DEEPINFRA_API_KEY"
URL_VAR = "DEEPINFRA_BASE_URL"  # the SDK's own endpoint variable (vendor plugins read it)
SANDBOX_URL_VAR = "DEEPINFRA_SANDBOX_BASE_URL"  # the reference backend's, apart from Hermes's inference

# Guess: the sandbox runs as root with HOME=/root; /workspace is the persistent
# directory the SDK documents.  Only /workspace survives a stop/start.
LAYOUT = PathLayout(home="/root", workspace="/workspace", user="root")
WORKSPACE = LAYOUT.workspace

# States (SDK tests and _TERMINAL_STATES).
CREATING, STARTING, RUNNING, STOPPING, STOPPED, FAILED, DELETED = (
    "creating",
    "starting",
    "running",
    "stopping",
    "stopped",
    "failed",
    "deleted",
)
STATES = (CREATING, STARTING, RUNNING, STOPPING, STOPPED, FAILED, DELETED)
# Guess: every sandbox that still holds resources counts toward the cap, stopped ones included.
ACTIVE_STATES = (CREATING, STARTING, RUNNING, STOPPING, STOPPED)

# The catalog.  The numbers are made up (the SDK test fixture's are too); "medium"
# with 4 GB is the default plan the plugin describes.
PLANS: tuple[dict[str, object], ...] = (
    {"id": "small", "vcpu": 1, "ram_gb": 2, "disk_gb": 10, "price_per_hour": 0.02},
    {"id": "medium", "vcpu": 2, "ram_gb": 4, "disk_gb": 20, "price_per_hour": 0.04},
    {"id": "large", "vcpu": 4, "ram_gb": 8, "disk_gb": 40, "price_per_hour": 0.08},
)
DEFAULT_PLAN = "medium"
IMAGE = "deepinfra/sandbox-base"  # fixed: no custom images
PROVIDER = "kata-qemu"  # what the SDK's test data shows

MAX_COMMAND_TIMEOUT_S = 30 * 60  # the per-command cap
MAX_FILE_BYTES = 100 * MIB  # per fs/content call

# Fault route names: what Faults.take(route, sandbox_id) is asked with, one per endpoint.
ROUTE_CREATE = "POST /v1/sandboxes"
ROUTE_LIST = "GET /v1/sandboxes"
ROUTE_CATALOG = "GET /v1/sandboxes/catalog"
ROUTE_GET = "GET /v1/sandboxes/{id}"
ROUTE_DELETE = "DELETE /v1/sandboxes/{id}"
ROUTE_STOP = "POST /v1/sandboxes/{id}/stop"
ROUTE_START = "POST /v1/sandboxes/{id}/start"
ROUTE_EXEC = "POST /v1/sandboxes/{id}/exec"
ROUTE_WRITE = "PUT /v1/sandboxes/{id}/fs/content"
ROUTE_READ = "GET /v1/sandboxes/{id}/fs/content"
ROUTES = (
    ROUTE_CREATE,
    ROUTE_LIST,
    ROUTE_CATALOG,
    ROUTE_GET,
    ROUTE_DELETE,
    ROUTE_STOP,
    ROUTE_START,
    ROUTE_EXEC,
    ROUTE_WRITE,
    ROUTE_READ,
)

ErrorShape = Literal["detail", "flat"]


@dataclass
class Settings:
    # Per-account cap on active sandboxes (429 beyond it).
    max_active: int = 5
    # State machine timings: creating -> starting -> running, stopping -> stopped,
    # starting -> running on start.  Short by default; the real service takes seconds.
    create_delay_s: float = 0.05
    boot_delay_s: float = 0.05
    stop_delay_s: float = 0.05
    # A terminated sandbox answers GET with state "deleted" this long, then 404.
    deleted_visible_s: float = 2.0
    # Exec: timeout_seconds 0 means this (Guess: the SDK's own default of 60 s);
    # larger values are clamped to the 30-minute cap (Guess: clamped, not refused).
    default_command_timeout_s: float = 60.0
    heartbeat_s: float = 10.0  # Guess: a {} line after this long without output
    # Guess: a client that goes away does not stop its command (the service has no
    # per-command cancel); the command runs on until it exits or times out.
    disconnect_kills: bool = False
    # Guess: no output limit; set one to end a command with an error line past it.
    output_limit_bytes: int | None = None
    # After the main process exits: relay output until every pipe is at EOF, or
    # nothing came for drain_quiet_s (a detached child may hold the pipe), or drain_max_s.
    drain_quiet_s: float = 0.3
    drain_max_s: float = 5.0
    chunk_bytes: int = 64 * 1024
    # Guess: exec runs in /workspace (the image's working directory).
    exec_cwd: str = WORKSPACE
    # Guess: the API documents 100 MiB per fs call only.  Stated fake limits on a JSON
    # request body (413 beyond it; an exec's argv cannot exceed Linux's 2 MiB ARG_MAX
    # anyway) and on how deeply it nests (400).
    max_json_bytes: int = 4 * MIB
    max_json_depth: int = 64
    # The body shape of scripted "status" faults: {"detail": {"error": m}} or {"error": m}.
    fault_error_shape: ErrorShape = "detail"
