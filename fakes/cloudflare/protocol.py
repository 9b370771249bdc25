"""Bridge protocol v1 on the wire: auth, the error body, JSON bodies and their validation.

Validation follows the public Worker's rules field by field, including its
JavaScript typing: booleans are not numbers, ``null`` means "use the default"
for optional fields, string sizes are UTF-8 bytes, NUL is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from fakes import bodies

from .settings import (
    DEFAULT_TIMEOUT_S,
    EXT_CONCURRENT_EXEC,
    EXT_LARGE_OUTPUT,
    INSTANCE_TYPES,
    MAX_AUTH_HEADER,
    MAX_BODY_BYTES,
    MAX_COMMAND_BYTES,
    MAX_JSON_DEPTH,
    MAX_OUTPUT_UNITS,
    MAX_PATH_BYTES,
    MAX_READ_BYTES,
    MAX_STDIN_BYTES,
    MAX_TIMEOUT_S,
    MIN_TIMEOUT_S,
    Settings,
)

SANDBOX_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
REQUEST_ID = re.compile(r"[a-f0-9]{32}")
_IMAGE = re.compile(r"[a-zA-Z0-9_-]+")
NO_STORE = {"Cache-Control": "no-store"}


class ApiError(Exception):
    """A failure with an HTTP status and a protocol error code."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def json_response(data: Any, status: int = 200) -> JSONResponse:
    return JSONResponse(data, status_code=status, headers=NO_STORE)


def error_response(exc: BaseException) -> JSONResponse:
    if isinstance(exc, ApiError):
        return json_response({"error": {"code": exc.code, "message": exc.message}}, exc.status)
    # Never expose internals, request bodies or credentials.
    return json_response({"error": {"code": "internal_error", "message": "Sandbox operation failed"}}, 503)


# -- auth -------------------------------------------------------------------------------
def secret_usable(secret: str | None) -> bool:
    return secret is not None and len(secret) >= 32 and not any(c.isspace() for c in secret)


def authorized(header: str | None, secret: str | None) -> bool:
    """Raise not_configured without a usable secret; else compare SHA-256 digests in constant time."""
    if not secret_usable(secret):
        raise ApiError(503, "not_configured", "Set the SANDBOX_API_TOKEN Worker secret")
    supplied = header or ""
    if len(supplied) > MAX_AUTH_HEADER:
        return False
    actual = hashlib.sha256(supplied.encode("utf-8", "surrogatepass")).digest()
    expected = hashlib.sha256(f"Bearer {secret}".encode()).digest()
    return hmac.compare_digest(actual, expected)


# -- bodies -----------------------------------------------------------------------------
def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not JSON")  # JSON.parse refuses NaN and Infinity


async def read_json(headers: Mapping[str, str], chunks: AsyncIterator[bytes]) -> dict[str, Any]:
    """A JSON object body: 415 unless application/json, 413 over 1 MiB declared or actual."""
    if headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise ApiError(415, "content_type", "Send application/json")
    try:
        declared = float(headers.get("content-length", "") or 0)
    except ValueError:
        declared = 0.0
    if declared > MAX_BODY_BYTES:
        raise ApiError(413, "payload_too_large", "Request exceeds 1 MiB")
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise ApiError(413, "payload_too_large", "Request exceeds 1 MiB")
    try:
        text = bytes(body).decode("utf-8")
        value = json.loads(text[1:] if text.startswith("\ufeff") else text, parse_constant=_no_constants)
    except UnicodeDecodeError:
        raise ApiError(400, "invalid_json", "Expected a JSON object: the body is not UTF-8")
    except RecursionError:
        raise ApiError(400, "invalid_json", "Expected a JSON object: it nests too deeply")
    except ValueError as exc:
        raise ApiError(400, "invalid_json", f"Expected a JSON object: {exc}")
    if not isinstance(value, dict):
        raise ApiError(400, "invalid_json", "Expected a JSON object")
    if bodies.depth(value) > MAX_JSON_DEPTH:
        raise ApiError(400, "invalid_json", f"Expected a JSON object nesting at most {MAX_JSON_DEPTH} levels")
    return value


def utf8_len(value: str) -> int:
    # A lone surrogate counts as the 3 bytes TextEncoder writes for it.
    return len(value.encode("utf-8", "surrogatepass"))


def well_formed(value: str) -> str:
    """The string TextEncoder would send: lone surrogates become U+FFFD."""
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _text(value: Any, name: str, max_bytes: int, *, empty: bool = False) -> str:
    """A string field as the Worker checks it; the message names what is wrong (the code stays invalid_field)."""
    if not isinstance(value, str):
        problem = "must be a string"
    elif not empty and not value:
        problem = "must not be empty"
    elif "\0" in value:
        problem = "contains a NUL byte"
    elif utf8_len(value) > max_bytes:
        problem = f"is longer than {max_bytes} UTF-8 bytes"
    else:
        return value
    raise ApiError(400, "invalid_field", f"Invalid {name}: it {problem}")


def _known(data: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    if any(key not in allowed for key in data):
        raise ApiError(400, "unknown_field", "Request contains an unsupported field")


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class WorkspaceConfig:
    persistent: bool
    cwd: str
    image: str
    instance: str

    def as_json(self) -> dict[str, Any]:
        return {"persistent": self.persistent, "cwd": self.cwd, "image": self.image, "instance": self.instance}


def workspace_config(data: Mapping[str, Any], settings: Settings) -> WorkspaceConfig:
    _known(data, ("persistent", "cwd", "image", "instance"))
    persistent = data.get("persistent")
    if not isinstance(persistent, bool):
        raise ApiError(400, "invalid_field", "persistent must be boolean")
    cwd = _text(_or(data.get("cwd"), "/workspace"), "cwd", MAX_PATH_BYTES)
    if not cwd.startswith("/"):
        raise ApiError(400, "invalid_field", "cwd must be absolute")
    image = _text(_or(data.get("image"), "hermes"), "image", 128)
    if not _IMAGE.fullmatch(image):
        raise ApiError(400, "invalid_field", "Invalid named image")
    instance = _text(_or(data.get("instance"), settings.default_instance), "instance", 32)
    if instance not in INSTANCE_TYPES or instance not in settings.allowed_instances:
        raise ApiError(400, "instance_not_allowed", "Requested instance is not enabled by the operator")
    return WorkspaceConfig(persistent, cwd, image, instance)


@dataclass(frozen=True)
class ExecRequest:
    request_id: str
    command: str
    timeout: float
    login: bool
    stdin: str | None
    concurrent: bool = False  # concurrent-exec extension
    max_output: int = MAX_OUTPUT_UNITS  # large-output extension


def _extension_fields(settings: Settings | None) -> tuple[str, ...]:
    """Exec fields the offered extensions add; a v1 Worker calls them unknown_field."""
    offered = settings.extensions if settings is not None else ()
    return (("concurrent",) if EXT_CONCURRENT_EXEC in offered else ()) + (
        ("max_output",) if EXT_LARGE_OUTPUT in offered else ()
    )


def exec_request(data: Mapping[str, Any], settings: Settings | None = None) -> ExecRequest:
    _known(data, ("request_id", "command", "timeout", "login", "stdin", *_extension_fields(settings)))
    request_id = _text(data.get("request_id"), "request_id", 32)
    if not REQUEST_ID.fullmatch(request_id):
        raise ApiError(400, "invalid_field", "Invalid request_id")
    command = _text(data.get("command"), "command", MAX_COMMAND_BYTES, empty=True)
    timeout = _or(data.get("timeout"), DEFAULT_TIMEOUT_S)
    if not _number(timeout) or not math.isfinite(timeout) or not MIN_TIMEOUT_S <= timeout <= MAX_TIMEOUT_S:
        raise ApiError(400, "invalid_timeout", f"timeout must be between {MIN_TIMEOUT_S} and {MAX_TIMEOUT_S:g} seconds")
    login = _or(data.get("login"), False)
    if not isinstance(login, bool):
        raise ApiError(400, "invalid_field", "login must be boolean")
    stdin = data.get("stdin")
    if stdin is not None:
        stdin = _text(stdin, "stdin", MAX_STDIN_BYTES, empty=True)
    concurrent = _or(data.get("concurrent"), False)
    if not isinstance(concurrent, bool):
        raise ApiError(400, "invalid_field", "concurrent must be boolean")
    max_output = _or(data.get("max_output"), MAX_OUTPUT_UNITS)
    ceiling = settings.large_output_units if settings is not None else MAX_OUTPUT_UNITS
    if (
        not _number(max_output)
        or not math.isfinite(max_output)
        or max_output != int(max_output)
        or not 1 <= max_output <= ceiling
    ):
        raise ApiError(400, "invalid_field", f"max_output must be an integer from 1 to {ceiling}")
    return ExecRequest(
        request_id,
        well_formed(command),
        float(timeout),
        login,
        None if stdin is None else well_formed(stdin),
        concurrent,
        int(max_output),
    )


@dataclass(frozen=True)
class ReadRequest:
    path: str
    max_bytes: int


def read_request(data: Mapping[str, Any]) -> ReadRequest:
    _known(data, ("path", "max_bytes"))
    path = _text(data.get("path"), "path", MAX_PATH_BYTES)
    if not path.startswith("/"):
        raise ApiError(400, "invalid_field", "path must be absolute")
    limit = _or(data.get("max_bytes"), MAX_READ_BYTES)
    if not _number(limit) or not math.isfinite(limit) or limit != int(limit) or not 0 <= limit <= MAX_READ_BYTES:
        raise ApiError(400, "invalid_field", f"max_bytes must be an integer from 0 to {MAX_READ_BYTES}")
    return ReadRequest(path, int(limit))
