"""Bridge failures and what each one means for the command that met it.

The Worker's error bodies are reduced to their code (``[a-z_]{1,64}``); its
message text is never shown, so nothing a proxy or a misconfigured Worker
echoes (a token, a header) reaches Hermes.  Every explanation says whether
the command ran: refused before the stream started means it did not run;
a stream that ended without an exit event means it may have run, and nothing
is retried.
"""

from __future__ import annotations

import json
import re
from typing import Any

from reference.common.errors import ConnectionErrors

from .settings import ENDPOINT_VAR, TOKEN_VAR

PREFIX = "cloudflare_sandbox"
HINT = f"check {ENDPOINT_VAR}, {TOKEN_VAR} and that the Worker is deployed"
_CODE = re.compile(r"[a-z_]{1,64}")
MAY_HAVE_RUN = (
    "the command may have run (fully or partly); nothing was retried automatically. "
    "Check its effects before running it again"
)

# Refusals that come before any process starts: the command did not run.
NOT_RUN = {
    "workspace_busy": "the workspace was busy with another operation",
    "workspace_missing": "the workspace does not exist in the Worker (deleted or never created)",
    "duplicate_request": "the Worker already saw this request id",
    "command_cancelled": "the command was cancelled before it started",
    "invalid_json": "the Worker could not read the request",
    "invalid_field": "the Worker refused a field of the request",
    "unknown_field": "the Worker does not know a field of the request (an older Worker?)",
    "invalid_timeout": "the timeout is outside the Worker's 0.1-900 s range",
    "payload_too_large": "the request is larger than the Worker's 1 MiB limit",
    "content_type": "the Worker refused the request's content type",
    "unauthorized": f"the Worker refused {TOKEN_VAR} (401): set it to the Worker's SANDBOX_API_TOKEN secret",
    "not_configured": (
        "the Worker has no usable SANDBOX_API_TOKEN secret (503 not_configured): "
        "set one with npx wrangler secret put SANDBOX_API_TOKEN"
    ),
    "not_found": f"the Worker does not serve this route (404): check that {ENDPOINT_VAR} is the bridge Worker",
    "method_not_allowed": f"the Worker refused the method (405): check that {ENDPOINT_VAR} is the bridge Worker",
    "instance_not_allowed": "HERMES_CF_INSTANCE is not in the Worker's ALLOWED_INSTANCE_TYPES",
    "image_not_found": "HERMES_CF_IMAGE names an image the Worker does not define in wrangler.jsonc",
    "config_conflict": (
        "the workspace exists with different settings (terminal.cwd, HERMES_CF_IMAGE, "
        "HERMES_CF_INSTANCE or container_persistent); use another HERMES_CF_WORKSPACE"
    ),
    "invalid_cwd": "terminal.cwd cannot be created or used in the container",
    "startup_timeout": "the container did not start in time; try again in a moment",
    "staging_failed": "the stdin could not be written into the container",
    "redirect_refused": (
        f"the Worker answered with a redirect, which is never followed: set {ENDPOINT_VAR} to "
        "the Worker's own origin (a Cloudflare Access login page also redirects: set "
        "HERMES_CF_ACCESS_CLIENT_ID and HERMES_CF_ACCESS_CLIENT_SECRET)"
    ),
    "blocked": (
        "Cloudflare refused the request before it reached the Worker (403); check Cloudflare Access "
        "and bot protection for the Worker's hostname"
    ),
}


class BridgeError(Exception):
    """A failed bridge call: the protocol code, the HTTP status if any, and whether the command ran."""

    def __init__(self, code: str, *, status: int | None = None, detail: str = "", ran: str | None = None):
        self.code = code if _CODE.fullmatch(code) else "unexpected_response"
        self.status = status
        self.detail = detail
        # "no": refused before it started; "unknown": the outcome is not known
        self.ran = ran or ("no" if self.code in NOT_RUN else "unknown")
        super().__init__(self.describe())

    def describe(self) -> str:
        reason = NOT_RUN.get(self.code) or TRANSPORT.get(self.code) or f"the Worker answered {self.code}"
        if self.status == 429:
            reason = f"rate limited: too many requests to the Worker ({self.code}); wait a minute and try again"
        status = f" (HTTP {self.status})" if self.status and self.code not in NOT_RUN else ""
        detail = f": {self.detail}" if self.detail else ""
        return f"{self.code}{status}: {reason}{detail}"


TRANSPORT = {
    "connection_error": "the connection to the Worker failed",
    "incomplete_stream": "the Worker's stream ended before the command's exit status arrived",
    "protocol_error": "the Worker sent something protocol v1 does not allow",
    "unexpected_response": "the Worker's answer was not a protocol v1 error",
}


def error_from_response(status: int, body: bytes) -> BridgeError:
    """A non-200 answer: keep only a well-formed protocol code, never the message."""
    code = ""
    try:
        data: Any = json.loads(body.decode("utf-8"))
        candidate = data["error"]["code"] if isinstance(data, dict) and isinstance(data.get("error"), dict) else ""
        code = candidate if isinstance(candidate, str) and _CODE.fullmatch(candidate) else ""
    except (ValueError, UnicodeDecodeError, KeyError, TypeError):
        code = ""
    if not code:
        code = "blocked" if status == 403 else "unexpected_response"
    return BridgeError(code, status=status)


connection_error = ConnectionErrors(PREFIX, HINT)


# What a failed command's result says, by stream error code; the output so far comes first.
STREAM_ERRORS = {
    "output_limit": (
        "the command's output went over the Worker's limit of {limit} characters, so the Worker "
        "stopped it; what came before is above, the rest was not received. This is an error, "
        "not a truncated result: redirect the output to a file and read it in parts"
    ),
    "hard_timeout": (
        "the command did not stop at its timeout and the Worker killed it at its hard deadline; the workspace was kept"
    ),
    "workspace_lost": (
        "workspace_lost: the workspace's container stopped before any snapshot existed, so its "
        "files are gone and the workspace is in an error state; it was not replaced. Start a new "
        "session or set another HERMES_CF_WORKSPACE to continue"
    ),
    "command_cancelled": "the command was cancelled before it started; it did not run",
    "startup_timeout": "the container did not start in time; the command did not run",
    "invalid_cwd": "terminal.cwd cannot be created or used in the container; the command did not run",
    "image_not_found": "HERMES_CF_IMAGE names an image the Worker does not define; the command did not run",
    "exec_failed": "the Worker could not run the command; " + MAY_HAVE_RUN,
}


def stream_error_text(code: str, *, limit: int) -> str:
    reason = STREAM_ERRORS.get(code, f"the Worker ended the command with {code}; " + MAY_HAVE_RUN)
    return f"\n[{PREFIX}: {reason.format(limit=f'{limit:,}')}]\n"


def refusal_text(error: BridgeError) -> str:
    """The result text for a command that met ``error``."""
    if error.ran == "no":
        return f"[{PREFIX}: the command did not run: {error.describe()}]\n"
    return f"\n[{PREFIX}: {error.describe()}; {MAY_HAVE_RUN}]\n"
