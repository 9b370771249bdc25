"""``POST .../read``: one regular file's raw bytes, holding the workspace like a command.

As in the Worker, ``stat -L`` and ``cat`` run inside the container (so paths,
symlinks and permissions are the box's own), ``X-File-Size`` is the size
checked before reading, and the body errors (the connection is cut) rather
than ending short if the file changes while it is read.  Where the world has
no mount namespaces a command would see this machine's paths, so the file is
opened through fakes.boxfs instead (the box's home, workspace and /tmp only).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from typing import IO, BinaryIO

from starlette.types import Receive, Scope, Send

from fakes import boxfs
from fakes.delivery import Delivery, DroppedConnection
from fakes.faults import Fault
from fakes.world import BoxProcess

from .protocol import ApiError, ReadRequest
from .workspace import Active, Workspace

_STAT = re.compile(r"(\d+) (.+)")


def _stat(ws: Workspace, path: str) -> tuple[BoxProcess, int]:
    """Start the container if needed and return (running cat, size)."""
    config = ws.require_config()
    box, _ = ws.ensure_running(config)
    proc = ws.world.spawn(box, argv=["/usr/bin/stat", "-L", "-c", "%s %F", "--", path])
    stdin, stdout, stderr = proc.pipes()
    stdin.close()
    described = stdout.read().decode("utf-8", "replace").strip()
    stderr.read()
    match = _STAT.fullmatch(described)
    if proc.wait() != 0 or not match:
        raise ApiError(404, "file_not_found", "No such file")
    if match.group(2) not in ("regular file", "regular empty file"):
        raise ApiError(400, "not_a_file", "Not a regular file")
    return proc, int(match.group(1))


def _open_host(ws: Workspace, path: str) -> tuple[BinaryIO, int]:
    """Start the container if needed and open the file through boxfs (a world without namespaces)."""
    config = ws.require_config()
    box, _ = ws.ensure_running(config)
    try:
        return boxfs.for_box(ws.world, box).open_read(path)
    except boxfs.FsError as exc:
        if exc.kind in ("is_a_directory", "not_a_file"):
            raise ApiError(400, "not_a_file", "Not a regular file")
        raise ApiError(404, "file_not_found", "No such file")


async def open_read(ws: Workspace, request: ReadRequest, fault: Fault | None) -> FileStream:
    active = ws.reserve("read")
    opened: BinaryIO | None = None
    try:
        with ws.lock:
            ws.require_config()
            ws.touch()
        if ws.world.namespaced:
            _, size = await asyncio.to_thread(_stat, ws, request.path)
        else:
            opened, size = await asyncio.to_thread(_open_host, ws, request.path)
        if size > request.max_bytes:
            raise ApiError(413, "file_too_large", f"File is {size} bytes")
        box = ws.box
        if box is None:
            raise ApiError(409, "workspace_lost", "Container stopped")
        if opened is not None:
            return FileStream(ws, active, opened, None, size, fault)
        cat = ws.world.spawn(box, argv=["/usr/bin/cat", "--", request.path])
        cat_in, cat_out, _ = cat.pipes()
        cat_in.close()
    except BaseException:
        if opened is not None:
            opened.close()
        ws.finish(active)
        raise
    return FileStream(ws, active, cat_out, cat, size, fault)


class FileStream:
    """The body: ``source`` (cat's stdout, or the file itself) read up to ``size`` bytes."""

    def __init__(
        self, ws: Workspace, active: Active, source: IO[bytes], cat: BoxProcess | None, size: int, fault: Fault | None
    ):
        self.ws, self.active, self.source, self.cat, self.size, self.fault = ws, active, source, cat, size, fault

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        delivery = Delivery(send, receive, self.fault, self.ws.bridge.closing)
        deadline = time.monotonic() + self.ws.settings.read_timeout_s
        sent, ok = 0, False
        try:
            await delivery.start(
                200,
                [
                    (b"content-type", b"application/octet-stream"),
                    (b"cache-control", b"no-store"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"x-file-size", str(self.size).encode()),
                ],
            )
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise DroppedConnection("read timeout")
                try:
                    data = await asyncio.wait_for(asyncio.to_thread(self.source.read, 65536), remaining)
                except TimeoutError:
                    raise DroppedConnection("read timeout")
                if not data:
                    break
                sent += len(data)
                if sent > self.size:
                    raise DroppedConnection("file grew while it was read")
                await delivery.body(data)
            code = await asyncio.to_thread(self.cat.wait) if self.cat is not None else 0
            if code != 0 or sent != self.size:
                raise DroppedConnection("file changed or could not be read")
            await delivery.end()
            ok = True
        finally:
            if not ok and self.cat is not None:
                self.cat.signal(signal.SIGTERM)
            with contextlib.suppress(OSError):
                self.source.close()
            self.ws.finish(self.active)
