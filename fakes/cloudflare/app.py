"""The ASGI app: the bridge Worker's routes, faults first, then auth, routing, and the workspace actions.

Order of checks, as in the public Worker: a scripted fault; auth (503
``not_configured`` without a usable secret, 401 ``unauthorized``); ``GET
/health``; the path (404 for an unknown route, a bad sandbox id or any query
string); the method (405); then, in the workspace, the JSON body (415, 413,
400) and the action's own checks.  Paths are matched undecoded, as the
Worker's URL pathname is.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

from fakes.delivery import CORRUPTING, FaultyReply, Silence
from fakes.faults import Fault
from fakes.keys import key_digest

from .bridge import Bridge
from .exec_stream import ExecStream
from .file_read import open_read
from .protocol import (
    SANDBOX_ID,
    ApiError,
    authorized,
    error_response,
    exec_request,
    json_response,
    read_json,
    read_request,
    workspace_config,
)
from .workspace import Workspace

logger = logging.getLogger("fakes.cloudflare")

_PATH = re.compile(r"/v1/sandboxes/([^/]+)(?:/(exec|read|release|checkpoint|cancel/([a-f0-9]{32})))?")
_FAULT_CODES = {
    400: "invalid_json",
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    409: "workspace_busy",
    413: "payload_too_large",
    415: "content_type",
}


def route_of(method: str, path: str) -> tuple[str, str | None]:
    """The fault route name and sandbox id of a request (see settings.ROUTES)."""
    match = _PATH.fullmatch(path)
    if path == "/health" or match is None:
        return f"{method} {path}", None
    suffix = match.group(2)
    template = "/v1/sandboxes/{id}"
    if suffix is not None:
        template += "/cancel/{request_id}" if suffix.startswith("cancel/") else f"/{suffix}"
    return f"{method} {template}", match.group(1)


def fault_reply(fault: Fault) -> Response:
    code = _FAULT_CODES.get(fault.status, "internal_error" if fault.status >= 500 else "injected_fault")
    return json_response({"error": {"code": code, "message": fault.message}}, fault.status)


def create_app(bridge: Bridge) -> Starlette:
    async def handle(request: Request) -> Any:
        raw = request.scope.get("raw_path") or request.scope["path"].encode()
        path = raw.decode("latin-1").split("?", 1)[0]
        route, sandbox = route_of(request.method, path)
        fault = bridge.faults.take(route, sandbox)
        if fault is not None:
            if fault.kind == "latency":
                await asyncio.sleep(fault.delay_s)
            elif fault.kind == "status":
                return fault_reply(fault)
            elif fault.kind == "silence":
                return Silence(bridge.closing)
        try:
            reply = await dispatch(bridge, request, path, fault)
        except ApiError as exc:
            reply = error_response(exc)
        except Exception as exc:
            logger.exception("bridge request %s failed", route)
            reply = error_response(exc)
        if fault is not None and fault.kind in CORRUPTING and isinstance(reply, Response):
            return FaultyReply(reply, fault, bridge.closing)
        return reply

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        reply = await handle(Request(scope, receive))
        await reply(scope, receive, send)

    # One catch-all mount: every method and path reaches the Worker's own rules.
    app = Starlette(routes=[Mount("", app=endpoint)])
    app.state.bridge = bridge
    return app


async def dispatch(bridge: Bridge, request: Request, path: str, fault: Fault | None) -> Any:
    header = request.headers.get("authorization")
    if not authorized(header, bridge.token):
        return json_response({"error": {"code": "unauthorized", "message": "Unauthorized"}}, 401)
    if path == "/health" and request.method == "GET":
        return json_response(bridge.settings.health())  # starts no compute
    match = _PATH.fullmatch(path)
    if match is None or not SANDBOX_ID.fullmatch(match.group(1)) or request.scope.get("query_string"):
        raise ApiError(404, "not_found", "Not found")
    suffix = match.group(2)
    action = suffix or {"GET": "status", "DELETE": "reset"}.get(request.method, "init")
    expected = {"status": "GET", "reset": "DELETE"}.get(action, "POST")
    if request.method != expected:
        raise ApiError(405, "method_not_allowed", "Method not allowed")
    ws = bridge.workspace(match.group(1))
    ws.credentials.add(key_digest(header[len("Bearer ") :] if header else ""))
    if action == "status":
        return json_response(ws.status())
    body = await read_json(request.headers, request.stream())
    return await act(ws, action, body, fault)


async def act(ws: Workspace, action: str, body: dict[str, Any], fault: Fault | None) -> Any:
    if action == "init":
        return json_response(ws.init(workspace_config(body, ws.settings)))
    if action == "exec":
        exec_req = exec_request(body, ws.settings)
        active, config = ws.begin_exec(exec_req)
        return ExecStream(ws, active, exec_req, config, fault)
    if action == "read":
        return await open_read(ws, read_request(body), fault)
    if action.startswith("cancel/"):
        ws.cancel(action[len("cancel/") :])
        return json_response({"ok": True})
    if action == "release":
        await asyncio.to_thread(_exclusive_release, ws)
    elif action == "checkpoint":
        await asyncio.to_thread(ws.checkpoint)
    elif action == "reset":
        if body.get("confirm") is not True:
            raise ApiError(400, "confirmation_required", "Send confirm: true to discard the workspace")
        await asyncio.to_thread(ws.reset)
    else:
        raise ApiError(404, "not_found", "Not found")
    return json_response({"ok": True})


def _exclusive_release(ws: Workspace) -> None:
    with ws.exclusive():
        ws.release()
