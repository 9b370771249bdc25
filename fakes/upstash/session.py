"""The live exec session, ``WS /v2/box/{id}/exec-session``, as upstash_box._exec_session speaks it.

Client -> server: ``start`` first (cmd via ``bash -lc`` or argv without a
shell, cwd, env overlay, tty/rows/cols), then ``stdin`` (base64),
``stdin_close``, ``resize``, ``signal`` (to the whole process group) and
``terminate`` (TERM, then KILL after graceMs or Settings.terminate_grace_s;
only the first counts).  Server -> client: ``started`` {pid, execId},
``stdout``/``stderr`` {data: base64 of raw bytes}, then ``exit`` {code}
(128+N after signal N) or ``error`` {message}, then a normal close.

Output is read from the process only as fast as frames are sent, so a
client that stops reading stops the process at its pipe.  A client that
goes away before the exit kills the process group; after a normal exit,
detached children live on.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import secrets
import signal
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from fakes import bodies, procio
from fakes.delivery import DroppedConnection
from fakes.faults import Fault
from fakes.world import CREATING, DELETED, ERROR, PAUSED, Box, BoxProcess

from .routes_exec import flood_chunks, spawn_error
from .service import ApiError, Service
from .settings import SIGNALS, WS_ROUTE

logger = logging.getLogger("fakes.upstash.session")

_SIGNUMS = {name: getattr(signal, "SIG" + name) for name in SIGNALS}
_STOPPING = {"TERM", "KILL", "INT", "HUP", "QUIT"}  # these end a flood fault early
_TAPPED = ("drop", "half-close", "garbage", "truncate")


class _Closed(Exception):
    """The session is over (a truncate fault closed it)."""


async def _deny(ws: WebSocket, status: int, message: str) -> None:
    await ws.send_denial_response(JSONResponse({"error": message}, status_code=status))


async def exec_session(ws: WebSocket) -> None:
    svc: Service = ws.app.state.service
    key = ws.path_params["id"]
    try:
        account = svc.authenticate(ws.headers)
    except ApiError as exc:
        await _deny(ws, exc.status, exc.message)
        return
    box = svc.find(account, key, include_deleted=True)
    fault = svc.faults.take(WS_ROUTE, box.id if box else key)
    if fault is not None and fault.kind == "latency":
        await asyncio.sleep(fault.delay_s)
    if fault is not None and fault.kind == "status":
        await _deny(ws, fault.status, fault.message)
        return
    if box is None or (box.state == DELETED and not svc.settings.deleted_visible):
        await _deny(ws, 404, f"box not found: {key}")
        return
    svc.seen(box, account)
    if svc.settings.paused_exec == "reject" and svc.state(box) in (PAUSED, "pausing"):
        await _deny(ws, 409, f"box {box.id} is paused; resume it before starting a session")
        return
    await ws.accept()
    try:
        await Session(ws, svc, box, fault).run()
    except (WebSocketDisconnect, OSError, _Closed):
        pass
    except DroppedConnection:
        return  # returning without a close frame makes uvicorn drop the TCP connection


class Outbox:
    """Frames to the client after ``started``, with a tapped fault cutting in at ``after_bytes`` of output."""

    def __init__(self, ws: WebSocket, fault: Fault | None):
        self.ws = ws
        self.fault = fault if fault is not None and fault.kind in _TAPPED else None
        self.sent = 0  # raw output bytes delivered
        self.muted = False

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send_text(json.dumps(frame))

    async def after_start(self) -> None:
        """Faults at 0 bytes act right after ``started`` (truncate waits for a frame to cut)."""
        f = self.fault
        if f is not None and f.after_bytes <= 0 and f.kind != "truncate":
            self.fault = None
            await self._act(f, None)

    async def output(self, name: str, data: bytes) -> None:
        if self.muted:
            return
        f = self.fault
        if f is not None and self.sent + len(data) >= f.after_bytes:
            cut = max(0, f.after_bytes - self.sent)
            head, data = data[:cut], data[cut:]
            if head:
                await self._output(name, head)
            if f.kind == "truncate" and not data:
                return  # the next frame is the one cut in half
            self.fault = None
            await self._act(f, _output_frame(name, data) if data else None)
            return
        await self._output(name, data)

    async def final(self, frame: dict[str, Any]) -> None:
        """The exit or error frame; a fault still pending acts on it."""
        if self.muted:
            return
        f = self.fault
        if f is not None:
            self.fault = None
            await self._act(f, frame)
        else:
            await self.send(frame)

    async def _output(self, name: str, data: bytes) -> None:
        await self.ws.send_text(_output_text(name, data))
        self.sent += len(data)
        # A send to a fast reader never suspends; yield so control frames (kill) are read meanwhile.
        await asyncio.sleep(0)

    async def _act(self, fault: Fault, frame: dict[str, Any] | None) -> None:
        if fault.kind == "drop":
            raise DroppedConnection("scripted drop")
        if fault.kind == "half-close":
            self.muted = True
            return
        if fault.kind == "garbage":
            await self.ws.send_text(fault.payload)
            if frame is not None:
                await self.send(frame)
            return
        text = json.dumps(frame)  # truncate: half a frame, then a normal close
        await self.ws.send_text(text[: len(text) // 2])
        await self.ws.close(1000)
        raise _Closed()


def _output_frame(name: str, data: bytes) -> dict[str, Any]:
    return {"type": name, "data": base64.b64encode(data).decode("ascii")}


def _output_text(name: str, data: bytes) -> str:
    """``json.dumps(_output_frame(name, data))`` without scanning the payload for characters to escape:
    base64 has none, and ``name`` is one of the protocol's stream names (the flood's 256 MiB pass here)."""
    return f'{{"type": "{name}", "data": "{base64.b64encode(data).decode("ascii")}"}}'


class Session:
    def __init__(self, ws: WebSocket, svc: Service, box: Box, fault: Fault | None):
        self.ws = ws
        self.svc = svc
        self.box = box
        self.fault = fault
        self.stop_flood = False

    async def _error(self, message: str) -> None:
        await self.ws.send_text(json.dumps({"type": "error", "message": message}))
        await self.ws.close(1000)

    async def _receive_start(self) -> dict[str, Any] | None:
        message = await self.ws.receive()
        if message["type"] == "websocket.disconnect":
            return None
        frame, problem = _parse(message, self.svc.settings.max_json_depth)
        if frame is None or frame.get("type") != "start":
            await self._error("the first frame must be a start frame" + (f" ({problem})" if problem else ""))
            return None
        return frame

    async def run(self) -> None:
        start = await self._receive_start()
        if start is None:
            return
        if self.fault is not None and self.fault.kind == "silence":
            while (await self.ws.receive())["type"] != "websocket.disconnect":
                pass
            return
        problem = await self._box_problem()
        if problem:
            await self._error(problem)
            return
        try:
            proc = self._spawn(start)
        except ApiError as exc:
            await self._error(exc.message)
            return
        await self._run(proc)

    async def _box_problem(self) -> str | None:
        state = self.svc.state(self.box)
        if state in (PAUSED, "pausing"):
            if self.svc.settings.paused_exec != "resume":
                return f"box {self.box.id} is paused; resume it before starting a session"
            await self.svc.resume_for_exec(self.box)
            state = self.svc.state(self.box)
        if state == ERROR:
            return f"box {self.box.id} is in the error state; it cannot run commands"
        if state == DELETED:
            return f"box {self.box.id} is deleted"
        if state == CREATING:
            return f"box {self.box.id} is still being created; try again when it is idle"
        return None

    def _spawn(self, start: dict[str, Any]) -> BoxProcess:
        argv, cmd = start.get("argv") or [], start.get("cmd")
        if argv:
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise ApiError(400, "argv must be a list of strings")
            cmd = None
        elif not isinstance(cmd, str) or not cmd:
            raise ApiError(400, "start requires cmd or argv")
        tty = start.get("tty") is True
        rows, cols = _dimension(start.get("rows")), _dimension(start.get("cols"))
        try:
            if isinstance(cmd, str):
                bodies.no_nul(cmd, "cmd")
            else:
                bodies.argv_without_nul(argv, "argv")
            cwd = self.svc.command_cwd(self.box, start.get("cwd"))
        except bodies.BadInput as exc:
            raise ApiError(400, str(exc))
        env = {**self.svc.box_env(self.box), **self.svc.overlay_env(start.get("env"))}
        try:
            return self.svc.world.spawn(
                self.box, cmd=cmd, argv=argv or None, cwd=cwd, env=env, tty=tty, rows=rows, cols=cols
            )
        except OSError as exc:
            raise spawn_error(exc)

    async def _run(self, proc: BoxProcess) -> None:
        exited = asyncio.ensure_future(procio.wait_exit(proc))
        stdin = procio.StdinWriter(proc, limit=self.svc.settings.stdin_buffer_bytes)
        out = Outbox(self.ws, self.fault)
        receiver = relay = None
        try:
            await out.send({"type": "started", "pid": proc.pid, "execId": "exec_" + secrets.token_hex(8)})
            await out.after_start()
            receiver = asyncio.create_task(self._receive(proc, stdin))
            relay = asyncio.create_task(self._relay(proc, exited, out))
            await asyncio.wait({receiver, relay}, return_when=asyncio.FIRST_COMPLETED)
            if not relay.done():
                return  # the client left before the output ended
            relay.result()  # a drop or truncate, or a failed send, ends the session here
            await asyncio.wait({receiver, exited}, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():
                return  # output closed early, then the client left before the exit
            result = exited.result()
            self.svc.add_cpu(self.box, result.cpu_ns)
            if self.box.state == DELETED:
                await out.final({"type": "error", "message": f"box {self.box.id} was deleted"})
            else:
                await out.final({"type": "exit", "code": result.code})
            if out.muted:  # half-closed: say nothing more, keep reading until the client leaves
                await receiver
                return
            await self.ws.close(1000)
        finally:
            for task in (receiver, relay):
                if task is not None:
                    task.cancel()
            await asyncio.gather(*(t for t in (receiver, relay) if t is not None), return_exceptions=True)
            await stdin.stop()
            procio.finish(proc, exited)

    async def _relay(self, proc: BoxProcess, exited: asyncio.Future[Any], out: Outbox) -> None:
        s = self.svc.settings
        if self.fault is not None and self.fault.kind == "flood":
            for piece in flood_chunks(self.fault.flood_bytes, s.chunk_bytes):
                if self.stop_flood:
                    break
                await out.output("stdout", piece)
        events = procio.output_events(
            procio.output_fds(proc), exited, chunk=s.chunk_bytes, quiet_s=s.drain_quiet_s, max_drain_s=s.drain_max_s
        )
        async with contextlib.aclosing(events) as stream:
            async for name, data in stream:
                await out.output(name, data)

    async def _receive(self, proc: BoxProcess, stdin: procio.StdinWriter) -> None:
        """Client frames until the client leaves; sends never wait on this, nor this on output."""
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            frame, _ = _parse(message, self.svc.settings.max_json_depth)
            if frame is None:
                continue  # like the SDK's own reader, an unparseable frame is skipped
            kind = frame.get("type")
            if kind == "stdin":
                await stdin.write(_b64(frame.get("data")))
            elif kind == "stdin_close":
                stdin.close()
            elif kind == "resize":
                rows, cols = _dimension(frame.get("rows")), _dimension(frame.get("cols"))
                if rows and cols:
                    proc.resize(rows, cols)
            elif kind == "signal":
                name = str(frame.get("signal") or "TERM").upper().removeprefix("SIG")
                if name in _SIGNUMS:
                    self.stop_flood |= name in _STOPPING
                    proc.signal(_SIGNUMS[name])
                else:
                    logger.debug("ignoring unsupported signal %r", name)
            elif kind == "terminate":
                grace_ms = frame.get("graceMs")
                grace = (
                    grace_ms / 1000
                    if isinstance(grace_ms, int | float) and not isinstance(grace_ms, bool) and grace_ms > 0
                    else self.svc.settings.terminate_grace_s
                )
                self.stop_flood = True
                proc.terminate(grace)


def _parse(message: Mapping[str, Any], max_depth: int) -> tuple[dict[str, Any] | None, str]:
    """(the frame as a JSON object, or None; what is wrong with it otherwise)."""
    raw = message.get("text")
    if raw is None and message.get("bytes") is not None:
        raw = message["bytes"].decode("utf-8", "replace")
    if raw is None:
        return None, "the frame is empty"
    try:
        frame = bodies.parse_json(raw, max_depth=max_depth, what="the frame")
    except bodies.BadInput as exc:
        return None, str(exc)
    return (frame, "") if isinstance(frame, dict) else (None, "the frame is not a JSON object")


def _b64(data: Any) -> bytes:
    if not isinstance(data, str):
        return b""
    try:
        return base64.b64decode(data)
    except (binascii.Error, ValueError):
        return b""


def _dimension(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 10000 else None
