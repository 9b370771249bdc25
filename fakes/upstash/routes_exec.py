"""One-shot exec (POST /exec) and exec-stream (raw output, then an ``event: exit`` trailer)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fakes import bodies, box_paths, procio
from fakes.delivery import CuttableStream, DroppedConnection, hang
from fakes.faults import Fault
from fakes.rest_skeleton import endpoint
from fakes.world import DELETED, PAUSED, Box, BoxProcess

from .service import ApiError, BoxContext, Service, missing_cwd

FLOOD_LINE = b"flood " * 15 + b"flood\n"


async def ready_for_exec(svc: Service, box: Box) -> None:
    """Refuse a box that cannot run commands, or resume a paused one when so configured."""
    if svc.settings.paused_exec == "resume" and svc.state(box) in (PAUSED, "pausing"):
        await svc.resume_for_exec(box)
    svc.require_usable(box)


async def _prepare(request: Request, ctx: BoxContext) -> tuple[Box, list[str], str]:
    """Validate an exec request: (box, argv, cwd as the process sees it)."""
    box = ctx.live_box()
    body = await ctx.svc.json_body(request)
    command = bodies.argv_field(body)
    if command is None:
        raise ApiError(400, "command must be a non-empty list of strings")
    await ready_for_exec(ctx.svc, box)
    return box, command, ctx.svc.command_cwd(box, body.get("folder") or None)


def _spawn(svc: Service, box: Box, argv: list[str], cwd: str) -> BoxProcess:
    try:
        proc = svc.world.spawn(box, argv=argv, cwd=cwd, env=svc.box_env(box))
    except OSError as exc:
        raise spawn_error(exc)
    if proc.stdin is not None:
        proc.stdin.close()  # one-shot commands get no input
    return proc


def _events(svc: Service, proc: BoxProcess, exited: asyncio.Future[Any]) -> AsyncGenerator[tuple[str, bytes], None]:
    s = svc.settings
    return procio.output_events(
        procio.output_fds(proc), exited, chunk=s.chunk_bytes, quiet_s=s.drain_quiet_s, max_drain_s=s.drain_max_s
    )


def spawn_error(exc: OSError) -> ApiError:
    """A command that could not start: 400 if the request made it impossible, else the fake's own 500."""
    if isinstance(exc, box_paths.NotInBox):  # the cwd went away between the check and the start
        return missing_cwd(exc)
    if exc.errno == errno.E2BIG:
        return ApiError(
            400,
            "the command and its environment are too long to start (E2BIG: Linux allows at most "
            "128 KiB per argument, 2 MiB in all)",
        )
    return ApiError(500, f"could not start the command: {exc}")


def flood_chunks(total: int, chunk: int) -> list[bytes]:
    """``total`` bytes of text lines, in pieces of at most ``chunk`` (one shared block)."""
    block = (FLOOD_LINE * (chunk // len(FLOOD_LINE) + 1))[:chunk]
    return [block] * (total // chunk) + ([block[: total % chunk]] if total % chunk else [])


@endpoint("POST /v2/box/{id}/exec")
async def exec_command(request: Request, ctx: BoxContext) -> Response:
    box, argv, cwd = await _prepare(request, ctx)
    proc = _spawn(ctx.svc, box, argv, cwd)
    exited = asyncio.ensure_future(procio.wait_exit(proc))
    output: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
    try:
        async with contextlib.aclosing(_events(ctx.svc, proc, exited)) as events:
            async for name, data in events:
                output[name].extend(data)
        result = await exited
    finally:
        procio.finish(proc, exited)
    ctx.svc.add_cpu(box, result.cpu_ns)
    if box.state == DELETED:
        raise ApiError(404, f"box {box.id} was deleted while the command ran")
    return JSONResponse(
        {
            "exit_code": result.code,
            "output": output["stdout"].decode("utf-8", "replace"),
            "error": output["stderr"].decode("utf-8", "replace"),
        }
    )


def _trailer(code: int, cpu_ns: int) -> bytes:
    return b"event: exit\ndata: " + json.dumps({"exit_code": code, "cpu_ns": cpu_ns}).encode() + b"\n\n"


def _error_trailer(message: str) -> bytes:
    return b"event: error\ndata: " + json.dumps({"error": message}).encode() + b"\n\n"


@endpoint("POST /v2/box/{id}/exec-stream", stream_faults=True)
async def exec_stream(request: Request, ctx: BoxContext) -> Response:
    box, argv, cwd = await _prepare(request, ctx)
    return CuttableStream(
        _stream(ctx, box, argv, cwd), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )


async def _stream(ctx: BoxContext, box: Box, argv: list[str], cwd: str) -> AsyncIterator[bytes]:
    """Merged output in arrival order, then the trailer; the fault (if any) cuts in at ``after_bytes``.

    The command starts on the first read of the body, so a reply that is never sent runs nothing.
    """
    svc, fault = ctx.svc, ctx.fault
    try:
        proc = _spawn(svc, box, argv, cwd)
    except ApiError as exc:
        yield _error_trailer(exc.message)
        return
    exited = asyncio.ensure_future(procio.wait_exit(proc))
    pending: Fault | None = (
        fault if fault is not None and fault.kind in ("drop", "half-close", "garbage", "truncate") else None
    )
    sent = 0
    try:
        pieces: list[bytes] = []
        if fault is not None and fault.kind == "flood":
            pieces = flood_chunks(fault.flood_bytes, svc.settings.chunk_bytes)
        for piece in pieces:
            yield piece
            await asyncio.sleep(0)  # let the disconnect listener run between chunks
        async with contextlib.aclosing(_events(svc, proc, exited)) as events:
            async for _, data in events:
                if pending is not None and sent + len(data) >= pending.after_bytes:
                    head, data = data[: pending.after_bytes - sent], data[pending.after_bytes - sent :]
                    if head:
                        yield head
                        sent += len(head)
                    kind, pending = pending.kind, None
                    if kind == "garbage":
                        yield (fault.payload if fault else "").encode()
                    elif kind == "drop":
                        raise DroppedConnection("scripted drop")
                    elif kind == "half-close":
                        await hang(svc.closing)
                        return
                    elif kind == "truncate":
                        whole = _trailer(0, 0)
                        yield whole[: len(whole) // 2]
                        return
                if data:
                    yield data
                    sent += len(data)
        result = await exited
        svc.add_cpu(box, result.cpu_ns)
        if pending is not None:  # the output ended before after_bytes: the fault hits the trailer
            if pending.kind == "drop":
                raise DroppedConnection("scripted drop")
            if pending.kind == "half-close":
                await hang(svc.closing)
                return
            if pending.kind == "truncate":
                whole = _trailer(result.code, result.cpu_ns)
                yield whole[: len(whole) // 2]
                return
            yield pending.payload.encode()
        if box.state == DELETED:
            yield _error_trailer(f"box {box.id} was deleted while the command ran")
        else:
            yield _trailer(result.code, result.cpu_ns)
    finally:
        procio.finish(proc, exited)


ROUTES = [
    Route("/v2/box/{id}/exec", exec_command, methods=["POST"]),
    Route("/v2/box/{id}/exec-stream", exec_stream, methods=["POST"]),
]
