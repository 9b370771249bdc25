"""fs/content: PUT and GET of raw bytes under /workspace, at most 100 MiB per call.

A write creates missing parent directories and replaces the file atomically;
a read of a missing path is 404, of a directory 400.  Every file operation
goes through fakes.boxfs (symlinks are followed inside /workspace only, however
the sandbox races them), and bodies are streamed to and from disk, so a
100 MiB transfer does not sit in the server's memory.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, BinaryIO, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fakes import boxfs
from fakes.delivery import CORRUPTING
from fakes.rest_skeleton import Context, endpoint

from .service import ApiError, Service
from .settings import MAX_FILE_BYTES, ROUTE_READ, ROUTE_WRITE

_READ_CHUNK = 256 * 1024
T = TypeVar("T")


def _too_large(size: int) -> ApiError:
    return ApiError(413, f"File too large: {size} bytes exceeds the limit of {MAX_FILE_BYTES} bytes (100 MiB)", "flat")


async def _disk(svc: Service, fn: Callable[..., T], *args: Any) -> T:
    try:
        return await run_in_threadpool(fn, *args)
    except boxfs.FsError as exc:
        raise svc.fs_error(exc)


@endpoint(ROUTE_WRITE)
async def write_file(request: Request, ctx: Context) -> Response:
    box, svc = ctx.box(), ctx.svc
    svc.require_running(box)
    path = svc.file_path(request.query_params.get("path"))
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FILE_BYTES:
        await _discard(request)  # read it all, so the client sees the 413 rather than a broken pipe
        raise _too_large(int(declared))
    out = await _disk(svc, svc.files(box).writer, path)
    try:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size <= MAX_FILE_BYTES:  # past the limit: read on, write nothing, answer 413
                await _disk(svc, out.write, chunk)
        if size > MAX_FILE_BYTES:
            raise _too_large(size)
        await _disk(svc, out.commit)
    finally:
        out.abort()  # nothing after a commit
    return JSONResponse({})


async def _discard(request: Request) -> int:
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
    return size


def _open(fs: boxfs.BoxFS, path: str) -> tuple[BinaryIO, int]:
    fh, size = fs.open_read(path)
    if size > MAX_FILE_BYTES:
        fh.close()
        raise _too_large(size)
    return fh, size


async def _chunks(fh: BinaryIO) -> AsyncIterator[bytes]:
    with fh:
        while chunk := await run_in_threadpool(fh.read, _READ_CHUNK):
            yield chunk


@endpoint(ROUTE_READ)
async def read_file(request: Request, ctx: Context) -> Response:
    box, svc = ctx.box(), ctx.svc
    svc.require_running(box)
    path = svc.file_path(request.query_params.get("path"))
    fh, size = await _disk(svc, _open, svc.files(box), path)
    if ctx.fault is not None and ctx.fault.kind in CORRUPTING:
        with fh:
            return Response(await run_in_threadpool(fh.read), media_type="application/octet-stream")
    return StreamingResponse(_chunks(fh), media_type="application/octet-stream", headers={"Content-Length": str(size)})


ROUTES = [
    Route("/v1/sandboxes/{id}/fs/content", write_file, methods=["PUT"]),
    Route("/v1/sandboxes/{id}/fs/content", read_file, methods=["GET"]),
]
