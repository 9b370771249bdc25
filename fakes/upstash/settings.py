"""Knobs of the Upstash Box fake, with the choices made where the real service is unknown.

Every default below that the research marks "Unknown" or "Guess" is a choice,
named here so a test can flip it (see ``Settings``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

SIZES = ("small", "medium", "large")
RUNTIMES = (
    "node",
    "python",
    "golang",
    "ruby",
    "rust",
    "node-alpine",
    "python-alpine",
    "golang-alpine",
    "ruby-alpine",
    "rust-alpine",
)
SIGNALS = ("TERM", "KILL", "INT", "HUP", "TSTP", "QUIT", "USR1", "USR2")
MIB = 1024 * 1024

# Fault route names: what Faults.take(route, box) is asked with, one per endpoint.
WS_ROUTE = "WS exec-session"
ROUTES = (
    "POST /v2/box",
    "GET /v2/box",
    "DELETE /v2/box",
    "GET /v2/box/{id}",
    "DELETE /v2/box/{id}",
    "POST /v2/box/{id}/pause",
    "POST /v2/box/{id}/resume",
    "GET /v2/box/{id}/status",
    "POST /v2/box/{id}/exec",
    "POST /v2/box/{id}/exec-stream",
    "GET /v2/box/{id}/files/read",
    "POST /v2/box/{id}/files/write",
    "GET /v2/box/{id}/files/list",
    "GET /v2/box/{id}/files/stat",
    "POST /v2/box/{id}/files/mkdir",
    "POST /v2/box/{id}/files/rename",
    "POST /v2/box/{id}/files/remove",
    "POST /v2/box/{id}/files/upload",
    "GET /v2/box/{id}/files/download",
    "POST /v2/box/{id}/config/labels",
    "DELETE /v2/box/{id}/config/labels/{label}",
    WS_ROUTE,
)

PausedPolicy = Literal["error", "reject", "resume"]


@dataclass
class Settings:
    # Box limit per API key; paused boxes count, deleted ones do not.  The real
    # status is unknown: 403 says "not allowed on this plan" without inviting a
    # retry the way 429 would.
    quota: int = 10
    quota_status: int = 403
    # A second box with a name the key already uses (Guess in the research: 409).
    name_conflict_status: int = 409
    # GET or list of a deleted box: 404 (False) or a record with status "deleted" (True).
    deleted_visible: bool = False
    # Exec (session or REST) on a paused box: "error" = an error frame naming the
    # paused state (REST: 409); "reject" = HTTP 409 at the WebSocket upgrade;
    # "resume" = resume the box and run.
    paused_exec: PausedPolicy = "error"
    # Grace between TERM and KILL for a "terminate" frame without graceMs.
    terminate_grace_s: float = 5.0
    # After the main process exits: keep relaying output until every pipe is at
    # EOF, or nothing arrived for drain_quiet_s, or drain_max_s of waiting passed
    # (time spent blocked on a slow client does not count).
    drain_quiet_s: float = 0.3
    drain_max_s: float = 5.0
    chunk_bytes: int = 64 * 1024
    # files/read rejects a longer ``length`` (the SDK documents 8 MiB), and a read without
    # ``length`` of more than this from its offset.
    read_max_bytes: int = 8 * MIB
    # Unknown upstream: a stated fake limit on one files/upload body (413 beyond it).
    # The parts stream to disk as they arrive, so this bounds disk use, not memory.
    max_upload_bytes: int = 1024 * MIB
    # The files API only reaches /workspace/home (third-party report of
    # permission_denied elsewhere); False opens the box's home and /tmp too.
    files_jail: bool = True
    # Start-frame env keys dropped silently (LD_PRELOAD is observed; the rest are
    # the same loader hooks).
    blocked_env: frozenset[str] = field(
        default_factory=lambda: frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"})
    )
    max_labels: int = 5
    max_label_len: int = 20
    # Stdin a session queues for a process that is not reading before the
    # server stops reading the socket.
    stdin_buffer_bytes: int = 16 * MIB
    # Unknown upstream: stated fake limits on a JSON request body (413 beyond it: room
    # for 8 MiB of files/write content in base64) and on how deeply it nests (400).
    max_json_bytes: int = 16 * MIB
    max_json_depth: int = 64
    # Give every box an UPSTASH_BLOB_TOKEN variable, as real boxes have.
    blob_token: bool = True
    # WebSocket keepalive pings; no pong deadline, so a client that stops
    # reading on purpose (backpressure) is not disconnected.
    ws_ping_interval_s: float | None = 20.0
    # Unknown upstream (the SDK's client takes frames of any size): a stated fake limit
    # on one exec-session frame; a bigger one closes the session (1009).
    ws_max_message_bytes: int = 64 * MIB
