"""fs/content: PUT and GET of raw bytes under /workspace, at most 100 MiB per call.

A write creates missing parent directories and replaces the file atomically;
a read of a missing path is 404, of a directory 400.  Bodies are streamed to
and from disk, so a 100 MiB transfer does not sit in the server's memory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fakes.delivery import CORRUPTING
from fakes.rest_skeleton import Context, endpoint

from .service import ApiError
from .settings import MAX_FILE_BYTES, ROUTE_READ, ROUTE_WRITE

_READ_CHUNK = 256 * 1024


def _too_large(size: int) -> ApiError:
    return ApiError(413, f"File too large: {size} bytes exceeds the limit of {MAX_FILE_BYTES} bytes (100 MiB)",
                    "flat")


def _prepare_parent(host: Path, path: str) -> None:
    if host.is_dir():
        raise ApiError(400, "Is a directory", "flat")
    try:
        host.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ApiError(400, f"Not a directory: a parent of {path} is a file", "flat")


@endpoint(ROUTE_WRITE)
async def write_file(request: Request, ctx: Context) -> Response:
    box = ctx.box()
    ctx.svc.require_running(box)
    path, host = ctx.svc.file_path(box, request.query_params.get("path"))
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_FILE_BYTES:
        await _discard(request)  # read it all, so the client sees the 413 rather than a broken pipe
        raise _too_large(int(declared))
    await run_in_threadpool(_prepare_parent, host, path)
    fd, tmp = tempfile.mkstemp(prefix=".fs-put-", dir=host.parent)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size <= MAX_FILE_BYTES:  # past the limit: read on, write nothing, answer 413
                    await run_in_threadpool(out.write, chunk)
        if size > MAX_FILE_BYTES:
            raise _too_large(size)
        await run_in_threadpool(os.replace, tmp, host)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return JSONResponse({})


async def _discard(request: Request) -> int:
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
    return size


def _open_for_read(host: Path) -> int:
    if host.is_dir():
        raise ApiError(400, "Is a directory", "flat")
    if not host.exists():
        raise ApiError(404, "File not found")
    size = host.stat().st_size
    if size > MAX_FILE_BYTES:
        raise _too_large(size)
    return size


async def _chunks(host: Path) -> AsyncIterator[bytes]:
    with open(host, "rb") as fh:
        while chunk := await run_in_threadpool(fh.read, _READ_CHUNK):
            yield chunk


@endpoint(ROUTE_READ)
async def read_file(request: Request, ctx: Context) -> Response:
    box = ctx.box()
    ctx.svc.require_running(box)
    _, host = ctx.svc.file_path(box, request.query_params.get("path"))
    size = await run_in_threadpool(_open_for_read, host)
    if ctx.fault is not None and ctx.fault.kind in CORRUPTING:
        return Response(await run_in_threadpool(host.read_bytes), media_type="application/octet-stream")
    return StreamingResponse(_chunks(host), media_type="application/octet-stream",
                             headers={"Content-Length": str(size)})


ROUTES = [
    Route("/v1/sandboxes/{id}/fs/content", write_file, methods=["PUT"]),
    Route("/v1/sandboxes/{id}/fs/content", read_file, methods=["GET"]),
]
