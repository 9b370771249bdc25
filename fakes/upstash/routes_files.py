"""The files API: read, write, list, stat, mkdir, rename, remove, upload, download.

Paths are absolute box paths (relative ones are relative to /workspace/home),
mapped onto the box's directory by World.host_path; by default only the
workspace is reachable (Settings.files_jail).  Disk work runs in a thread.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fakes.rest_skeleton import endpoint

from . import multipart
from .service import ApiError, BoxContext

_KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink"}


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _os_error(exc: OSError, path: str) -> ApiError:
    if isinstance(exc, FileNotFoundError):
        return ApiError(404, f"no such file or directory: {path}")
    if isinstance(exc, IsADirectoryError):
        return ApiError(400, f"is a directory: {path}")
    if isinstance(exc, NotADirectoryError):
        return ApiError(400, f"not a directory: {path}")
    if isinstance(exc, FileExistsError):
        return ApiError(409, f"already exists: {path}")
    if isinstance(exc, PermissionError):
        return ApiError(403, f"permission_denied: {path}")
    return ApiError(500, f"{path}: {exc.strerror or exc}")


async def _disk(path: str, fn: Any, *args: Any) -> Any:
    try:
        return await run_in_threadpool(fn, *args)
    except OSError as exc:
        raise _os_error(exc, path)


def _int_param(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, f"{name} must be an integer")
    if value < 0:
        raise ApiError(400, f"{name} must not be negative")
    return value


def _read(host: Path, offset: int, length: int | None) -> bytes:
    if host.is_dir():
        raise IsADirectoryError(str(host))
    with open(host, "rb") as fh:
        fh.seek(offset)
        return fh.read() if length is None else fh.read(length)


@endpoint("GET /v2/box/{id}/files/read")
async def read_file(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    path, host = ctx.svc.file_path(box, request.query_params.get("path"))
    length, offset = _int_param(request, "length"), _int_param(request, "offset") or 0
    if length is not None and length > ctx.svc.settings.read_max_bytes:
        raise ApiError(400, f"length {length} exceeds the maximum of {ctx.svc.settings.read_max_bytes} bytes "
                            "(8 MiB) per read")
    data = await _disk(path, _read, host, offset, length)
    encoding = (request.query_params.get("encoding") or "utf-8").lower()
    if encoding == "base64":
        return JSONResponse({"content": base64.b64encode(data).decode("ascii")})
    if encoding not in ("utf-8", "utf8"):
        raise ApiError(400, f"unsupported encoding {encoding!r}; use utf-8 or base64")
    return JSONResponse({"content": data.decode("utf-8", "replace")})


def _write(host: Path, data: bytes) -> None:
    host.parent.mkdir(parents=True, exist_ok=True)
    host.write_bytes(data)


@endpoint("POST /v2/box/{id}/files/write")
async def write_file(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    body = await ctx.svc.json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("content"), str):
        raise ApiError(400, "body must have a path and a string content")
    path, host = ctx.svc.file_path(box, body.get("path"))
    encoding = (body.get("encoding") or "utf-8").lower()
    if encoding == "base64":
        try:
            data = base64.b64decode(body["content"], validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(400, "content is not valid base64")
    elif encoding in ("utf-8", "utf8"):
        data = body["content"].encode("utf-8", "surrogatepass")
    else:
        raise ApiError(400, f"unsupported encoding {encoding!r}; use utf-8 or base64")
    await _disk(path, _write, host, data)
    return JSONResponse({"message": "File written", "path": path, "size": len(data)})


def _list(host: Path, folder: str) -> list[dict[str, Any]]:
    entries = []
    with os.scandir(host) as it:
        for entry in sorted(it, key=lambda e: e.name):
            st = entry.stat(follow_symlinks=False)
            entries.append({"name": entry.name, "path": folder.rstrip("/") + "/" + entry.name,
                            "size": st.st_size, "is_dir": entry.is_dir(), "mod_time": _iso(st.st_mtime)})
    return entries


@endpoint("GET /v2/box/{id}/files/list")
async def list_files(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    folder, host = ctx.svc.file_path(box, request.query_params.get("folder") or ctx.svc.world.layout.workspace)
    return JSONResponse({"files": await _disk(folder, _list, host, folder)})


def _stat(host: Path, follow: bool) -> dict[str, Any]:
    st = host.stat() if follow else host.lstat()
    return {"type": _KINDS.get(stat.S_IFMT(st.st_mode), "other"), "size": st.st_size, "mod_time": _iso(st.st_mtime),
            "inode": st.st_ino, "version": f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"}


@endpoint("GET /v2/box/{id}/files/stat")
async def stat_file(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    follow = request.query_params.get("follow", "").lower() in ("1", "true", "yes")
    path, host = ctx.svc.file_path(box, request.query_params.get("path"), follow=follow)
    return JSONResponse(await _disk(path, _stat, host, follow))


def _mkdir(host: Path, parents: bool) -> None:
    host.mkdir(parents=parents, exist_ok=parents)


@endpoint("POST /v2/box/{id}/files/mkdir")
async def make_dir(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    body = await ctx.svc.json_body(request)
    path, host = ctx.svc.file_path(box, body.get("path") if isinstance(body, dict) else None)
    await _disk(path, _mkdir, host, bool(body.get("parents")))
    return JSONResponse({"message": "Directory created", "path": path})


@endpoint("POST /v2/box/{id}/files/rename")
async def rename_file(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    body = await ctx.svc.json_body(request)
    if not isinstance(body, dict):
        raise ApiError(400, "body must have from and to")
    src, src_host = ctx.svc.file_path(box, body.get("from"), follow=False)
    dst, dst_host = ctx.svc.file_path(box, body.get("to"), follow=False)
    if not src_host.exists() and not src_host.is_symlink():
        raise ApiError(404, f"no such file or directory: {src}")
    await _disk(dst, os.rename, src_host, dst_host)
    return JSONResponse({"message": "Renamed", "from": src, "to": dst})


def _remove(host: Path, recursive: bool) -> None:
    if host.is_dir() and not host.is_symlink():
        if not recursive:
            raise IsADirectoryError(str(host))
        shutil.rmtree(host)
    else:
        host.unlink()


@endpoint("POST /v2/box/{id}/files/remove")
async def remove_file(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    body = await ctx.svc.json_body(request)
    path, host = ctx.svc.file_path(box, body.get("path") if isinstance(body, dict) else None, follow=False)
    if path == ctx.svc.world.layout.workspace or host == box.workspace_dir:
        raise ApiError(403, "permission_denied: the workspace itself cannot be removed")
    try:
        await _disk(path, _remove, host, bool(body.get("recursive")))
    except ApiError as exc:
        if exc.status == 400 and "is a directory" in exc.message:
            raise ApiError(400, f"{path} is a directory; pass recursive to remove it")
        raise
    return JSONResponse({"message": "Removed", "path": path})


@endpoint("POST /v2/box/{id}/files/upload")
async def upload_files(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    try:
        parts = multipart.parse(await request.body(), request.headers.get("content-type", ""))
    except multipart.MultipartError as exc:
        raise ApiError(400, str(exc))
    paths = [p.data.decode("utf-8", "replace") for p in parts if p.name == "paths"]
    files = [p.data for p in parts if p.name == "files"]
    if not files or len(paths) != len(files):
        raise ApiError(400, f"upload needs one 'paths' field per 'files' part (got {len(paths)} paths, "
                            f"{len(files)} files)")
    targets = [ctx.svc.file_path(box, p) for p in paths]  # check every path before writing any
    for (path, host), data in zip(targets, files, strict=True):
        await _disk(path, _write, host, data)
    return JSONResponse({"message": "Files uploaded", "paths": [p for p, _ in targets]})


@endpoint("GET /v2/box/{id}/files/download")
async def download_file(request: Request, ctx: BoxContext) -> Response:
    box = ctx.live_box()
    path, host = ctx.svc.file_path(box, request.query_params.get("folder") or request.query_params.get("path"))
    data = await _disk(path, _read, host, 0, None)
    return Response(data, media_type="application/octet-stream",
                    headers={"Content-Disposition": f'attachment; filename="{host.name}"'})


ROUTES = [
    Route("/v2/box/{id}/files/read", read_file, methods=["GET"]),
    Route("/v2/box/{id}/files/write", write_file, methods=["POST"]),
    Route("/v2/box/{id}/files/list", list_files, methods=["GET"]),
    Route("/v2/box/{id}/files/stat", stat_file, methods=["GET"]),
    Route("/v2/box/{id}/files/mkdir", make_dir, methods=["POST"]),
    Route("/v2/box/{id}/files/rename", rename_file, methods=["POST"]),
    Route("/v2/box/{id}/files/remove", remove_file, methods=["POST"]),
    Route("/v2/box/{id}/files/upload", upload_files, methods=["POST"]),
    Route("/v2/box/{id}/files/download", download_file, methods=["GET"]),
]
