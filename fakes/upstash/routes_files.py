"""The files API: read, write, list, stat, mkdir, rename, remove, upload, download.

Paths are absolute box paths (relative ones are relative to /workspace/home);
by default only the workspace is reachable (Settings.files_jail).  Every file
operation goes through fakes.boxfs, which never follows a symlink out of the
box however the box races it, and runs in a thread.  Uploads and downloads
stream: a part's bytes go to disk as they arrive, a download leaves the disk
in chunks.
"""

from __future__ import annotations

import base64
import binascii
import functools
import stat
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, BinaryIO, TypeVar

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from fakes import boxfs
from fakes.rest_skeleton import endpoint, size_text
from fakes.world import Box

from . import multipart
from .service import ApiError, BoxContext, Service

_KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink"}
_CHUNK = 256 * 1024
_MAX_PATH_FIELD = 4096
T = TypeVar("T")


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


async def _disk(svc: Service, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return await run_in_threadpool(fn, *args, **kwargs)
    except boxfs.FsError as exc:
        raise svc.fs_error(exc)


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


def _read(fs: boxfs.BoxFS, path: str, offset: int, length: int | None, limit: int) -> bytes:
    fh, size = fs.open_read(path)
    with fh:
        if length is None and size - offset > limit:
            raise ApiError(
                400,
                f"{path} has {size - offset} bytes from offset {offset}; read at most {limit} "
                f"bytes ({size_text(limit)}) per call with offset and length",
            )
        fh.seek(offset)
        return fh.read() if length is None else fh.read(length)


@endpoint("GET /v2/box/{id}/files/read")
async def read_file(request: Request, ctx: BoxContext) -> Response:
    box, svc = ctx.live_box(), ctx.svc
    path = svc.file_path(request.query_params.get("path"))
    length, offset = _int_param(request, "length"), _int_param(request, "offset") or 0
    limit = svc.settings.read_max_bytes
    if length is not None and length > limit:
        raise ApiError(400, f"length {length} exceeds the maximum of {limit} bytes ({size_text(limit)}) per read")
    data = await _disk(svc, _read, svc.files(box), path, offset, length, limit)
    encoding = (request.query_params.get("encoding") or "utf-8").lower()
    if encoding == "base64":
        return JSONResponse({"content": base64.b64encode(data).decode("ascii")})
    if encoding not in ("utf-8", "utf8"):
        raise ApiError(400, f"unsupported encoding {encoding!r}; use utf-8 or base64")
    return JSONResponse({"content": data.decode("utf-8", "replace")})


@endpoint("POST /v2/box/{id}/files/write")
async def write_file(request: Request, ctx: BoxContext) -> Response:
    box, svc = ctx.live_box(), ctx.svc
    body = await svc.json_body(request)
    if not isinstance(body, dict) or not isinstance(body.get("content"), str):
        raise ApiError(400, "body must have a path and a string content")
    path = svc.file_path(body.get("path"))
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
    await _disk(svc, svc.files(box).write, path, data)
    return JSONResponse({"message": "File written", "path": path, "size": len(data)})


def _list(fs: boxfs.BoxFS, folder: str) -> list[dict[str, Any]]:
    return [
        {
            "name": e.name,
            "path": folder.rstrip("/") + "/" + e.name,
            "size": e.stat.st_size,
            "is_dir": e.is_dir,
            "mod_time": _iso(e.stat.st_mtime),
        }
        for e in fs.list(folder)
    ]


@endpoint("GET /v2/box/{id}/files/list")
async def list_files(request: Request, ctx: BoxContext) -> Response:
    box, svc = ctx.live_box(), ctx.svc
    folder = svc.file_path(request.query_params.get("folder") or svc.world.layout.workspace)
    return JSONResponse({"files": await _disk(svc, _list, svc.files(box), folder)})


def _stat(fs: boxfs.BoxFS, path: str, follow: bool) -> dict[str, Any]:
    st = fs.stat(path, follow=follow)
    return {
        "type": _KINDS.get(stat.S_IFMT(st.st_mode), "other"),
        "size": st.st_size,
        "mod_time": _iso(st.st_mtime),
        "inode": st.st_ino,
        "version": f"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}",
    }


@endpoint("GET /v2/box/{id}/files/stat")
async def stat_file(request: Request, ctx: BoxContext) -> Response:
    box, svc = ctx.live_box(), ctx.svc
    follow = request.query_params.get("follow", "").lower() in ("1", "true", "yes")
    path = svc.file_path(request.query_params.get("path"))
    return JSONResponse(await _disk(svc, _stat, svc.files(box), path, follow))


@endpoint("POST /v2/box/{id}/files/mkdir")
async def make_dir(request: Request, ctx: BoxContext) -> Response:
    box, svc = ctx.live_box(), ctx.svc
    body = await svc.json_body(request)
    path = svc.file_path(body.get("path") if isinstance(body, dict) else None)
    parents = bool(body.get("parents"))
    await _disk(svc, svc.files(box).mkdir, path, parents=parents, exist_ok=parents)
    return JSONResponse({"message": "Directory created", "path": path})


@endpoint("POST /v2/box/{id}/files/rename")
async def rename_file(request: Request, ctx: BoxContext) -> Response:
    box, svc = ctx.live_box(), ctx.svc
    body = await svc.json_body(request)
    if not isinstance(body, dict):
        raise ApiError(400, "body must have from and to")
    src, dst = svc.file_path(body.get("from")), svc.file_path(body.get("to"))
    await _disk(svc, svc.files(box).rename, src, dst)
    return JSONResponse({"message": "Renamed", "from": src, "to": dst})


@endpoint("POST /v2/box/{id}/files/remove")
async def remove_file(request: Request, ctx: BoxContext) -> Response:
    box, svc = ctx.live_box(), ctx.svc
    body = await svc.json_body(request)
    path = svc.file_path(body.get("path") if isinstance(body, dict) else None)
    try:
        await _disk(svc, svc.files(box).remove, path, recursive=bool(body.get("recursive")))
    except ApiError as exc:
        if exc.status == 400 and "is a directory" in exc.message:
            raise ApiError(400, f"{path} is a directory; pass recursive to remove it")
        if exc.status == 403 and path == svc.world.layout.workspace:
            raise ApiError(403, "permission_denied: the workspace itself cannot be removed")
        raise
    return JSONResponse({"message": "Removed", "path": path})


class _Upload:
    """The files of one upload: each ``files`` part goes to the path of the ``paths`` field of its rank,
    written as it arrives; a part whose path has not come yet waits in a spool file off the box."""

    def __init__(self, svc: Service, box: Box):
        self.svc, self.fs = svc, svc.files(box)
        self.paths: list[str] = []
        self.files = 0
        self.field: bytearray | None = None  # a "paths" field being read
        self.out: boxfs.Writer | BinaryIO | None = None  # where the current file part goes
        self.spooled: list[tuple[int, BinaryIO]] = []
        self.checked = 0  # paths checked to be inside the reachable area

    async def start(self, part: multipart.PartStart) -> None:
        if part.name == "paths":
            self.field = bytearray()
        elif part.name == "files":
            await self._check_paths()  # every path so far, before any file is written
            rank, self.files = self.files, self.files + 1
            if rank < len(self.paths):
                self.out = await _disk(self.svc, self.fs.writer, self.paths[rank])
            else:
                spool = tempfile.TemporaryFile(dir=self.svc.world.root)  # noqa: SIM115 - closed in finish()
                self.spooled.append((rank, spool))
                self.out = spool

    async def data(self, chunk: bytes) -> None:
        if self.field is not None:
            if len(self.field) + len(chunk) > _MAX_PATH_FIELD:
                raise ApiError(400, f"a 'paths' field is longer than {_MAX_PATH_FIELD} bytes")
            self.field += chunk
        elif self.out is not None:
            await _disk(self.svc, self.out.write, chunk)

    async def end(self) -> None:
        if self.field is not None:
            self.paths.append(self.svc.file_path(self.field.decode("utf-8", "replace")))
            self.field = None
        elif isinstance(self.out, boxfs.Writer):
            await _disk(self.svc, self.out.commit)
        self.out = None

    async def _check_paths(self) -> None:
        for path in self.paths[self.checked :]:
            await _disk(self.svc, self.fs.check, path)
        self.checked = len(self.paths)

    async def finish(self) -> list[str]:
        if not self.files or len(self.paths) != self.files:
            raise ApiError(
                400,
                f"upload needs one 'paths' field per 'files' part (got {len(self.paths)} paths, {self.files} files)",
            )
        await self._check_paths()
        for rank, spool in self.spooled:
            spool.seek(0)
            await _disk(self.svc, self.fs.write, self.paths[rank], iter(functools.partial(spool.read, _CHUNK), b""))
        return self.paths

    def close(self) -> None:
        if isinstance(self.out, boxfs.Writer):
            self.out.abort()
        for _, spool in self.spooled:
            spool.close()


@endpoint("POST /v2/box/{id}/files/upload")
async def upload_files(request: Request, ctx: BoxContext) -> Response:
    box, svc = ctx.live_box(), ctx.svc
    try:
        parser = multipart.StreamParser(request.headers.get("content-type", ""))
    except multipart.MultipartError as exc:
        raise ApiError(400, str(exc))
    upload = _Upload(svc, box)
    try:
        async for chunk in svc.bounded_stream(request, svc.settings.max_upload_bytes, "upload"):
            for event in parser.feed(chunk):
                if isinstance(event, multipart.PartStart):
                    await upload.start(event)
                elif isinstance(event, multipart.PartData):
                    await upload.data(event.data)
                else:
                    await upload.end()
        parser.close()
        paths = await upload.finish()
    except multipart.MultipartError as exc:
        raise ApiError(400, str(exc))
    finally:
        upload.close()
    return JSONResponse({"message": "Files uploaded", "paths": paths})


async def _chunks(fh: BinaryIO) -> AsyncIterator[bytes]:
    with fh:
        while chunk := await run_in_threadpool(fh.read, _CHUNK):
            yield chunk


@endpoint("GET /v2/box/{id}/files/download")
async def download_file(request: Request, ctx: BoxContext) -> Response:
    box, svc = ctx.live_box(), ctx.svc
    path = svc.file_path(request.query_params.get("folder") or request.query_params.get("path"))
    fh, size = await _disk(svc, svc.files(box).open_read, path)
    name = path.rsplit("/", 1)[-1].replace('"', "")
    return StreamingResponse(
        _chunks(fh),
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{name}"', "Content-Length": str(size)},
    )


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
