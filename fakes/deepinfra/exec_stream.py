"""POST /v1/sandboxes/{id}/exec: argv without a shell, answered with an NDJSON stream.

Lines: ``{"stdout": text}`` and ``{"stderr": text}`` as output arrives (each
stream decoded as UTF-8 with replacement, never splitting a character), a
``{}`` heartbeat after ``heartbeat_s`` of silence, and one terminal line:
``{"returncode": N}``, or ``{"error": message}`` when the service ended the
command (its timeout, a stop, a failure or a termination of the sandbox, or the
output limit).  JSON is ASCII-escaped, so no output character can split a line
for a splitlines-based reader (httpx's ``iter_lines``).

The child's stdin is /dev/null.  A command outlives its HTTP request: a client
that goes away stops reading, nothing more (no per-command cancel), and a
supervisor task still enforces the timeout and reaps the process.  Output is
read only as fast as the client takes it (a one-line queue), so a slow client
slows the command down instead of growing the server's memory.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import signal
import time
from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from fakes import bodies, procio
from fakes.delivery import Delivery
from fakes.faults import Fault
from fakes.rest_skeleton import Context, endpoint
from fakes.world import Box, BoxProcess

from .service import ApiError, ExecRun, Service, epoch
from .settings import MAX_COMMAND_TIMEOUT_S, ROUTE_EXEC

HEADERS = [(b"content-type", b"application/x-ndjson"), (b"cache-control", b"no-store")]
_FLOOD_LINE = "flood " * 15 + "flood\n"
_ENDINGS = {
    "stopped": "Sandbox was stopped while the command was running",
    "terminated": "Sandbox was terminated while the command was running",
    "failed": "Sandbox failed while the command was running",
}
_supervisors: set[asyncio.Task[Any]] = set()  # commands whose client left are still watched


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("ascii") + b"\n"


def effective_timeout(svc: Service, requested: int) -> float:
    return float(min(requested, MAX_COMMAND_TIMEOUT_S)) if requested > 0 else svc.settings.default_command_timeout_s


@endpoint(ROUTE_EXEC, stream_faults=True)
async def exec_command(request: Request, ctx: Context) -> Any:
    box = ctx.box()
    body = await ctx.svc.json_body(request)
    command = bodies.argv_field(body)
    if command is None:
        raise ApiError(422, "command must be a non-empty list of strings")
    requested = body.get("timeout_seconds", 0)
    if not isinstance(requested, int) or isinstance(requested, bool) or requested < 0:
        raise ApiError(422, "timeout_seconds must be a non-negative integer")
    ctx.svc.require_running(box)
    return ExecStream(ctx.svc, box, command, effective_timeout(ctx.svc, requested), ctx.fault)


class ExecStream:
    """The streamed reply (an ASGI callable) for one command."""

    def __init__(self, svc: Service, box: Box, argv: Sequence[str], timeout_s: float, fault: Fault | None):
        self.svc, self.box, self.argv, self.timeout_s, self.fault = svc, box, list(argv), timeout_s, fault

    def _spawn(self) -> BoxProcess:
        # The sandbox's directory, resolved inside it by the world (missing there: the start fails).
        # DeepInfra's exec has no stdin channel: the command reads /dev/null.
        return self.svc.world.spawn(self.box, argv=self.argv, cwd=self.svc.settings.exec_cwd, stdin_null=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        svc = self.svc
        run = ExecRun(self.box, epoch(self.box))
        try:
            proc = self._spawn()
        except (OSError, ValueError) as exc:
            await Delivery(send, receive, None, svc.closing).start(200, HEADERS)
            await send({"type": "http.response.body", "body": line({"error": f"could not start: {exc}"})})
            return

        def kill() -> None:
            proc.signal(signal.SIGCONT)
            proc.signal(signal.SIGKILL)

        run.kill = kill
        svc.track(run)
        if run.ended_by:  # stopped between the request and the spawn
            run.kill()
        exited = asyncio.ensure_future(procio.wait_exit(proc))
        supervisor = asyncio.create_task(self._supervise(run, proc, exited))
        _supervisors.add(supervisor)
        supervisor.add_done_callback(_supervisors.discard)

        gone = asyncio.Event()
        delivery = Delivery(send, receive, self.fault, svc.closing, gone)
        await delivery.start(200, HEADERS)
        watcher = asyncio.create_task(self._watch(receive, gone))
        queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=1)
        producer = asyncio.create_task(self._produce(run, proc, exited, queue))
        finished = False
        try:
            finished = await self._relay(queue, delivery, gone)
            if finished and not gone.is_set():
                result = await asyncio.shield(exited)
                ending = self._ending(run)
                await delivery.body(line({"error": ending} if ending else {"returncode": result.code}))
                await delivery.end()
        finally:
            watcher.cancel()
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)
            procio.close_io(proc)  # a child still writing (or the command, if the client left) gets EPIPE
            if not finished and svc.settings.disconnect_kills:
                run.kill()

    async def _relay(self, queue: asyncio.Queue[bytes | None], delivery: Delivery, gone: asyncio.Event) -> bool:
        """Send output lines and heartbeats until the output is over (True) or the client left (False)."""
        heartbeat = self.svc.settings.heartbeat_s
        while not gone.is_set() and not delivery.stopped:
            try:
                item = await asyncio.wait_for(queue.get(), heartbeat)
            except TimeoutError:
                await delivery.body(b"{}\n")
                continue
            if item is None:
                return True
            await delivery.body(item)
        return False

    async def _produce(
        self, run: ExecRun, proc: BoxProcess, exited: asyncio.Future[Any], queue: asyncio.Queue[bytes | None]
    ) -> None:
        s = self.svc.settings
        if self.fault is not None and self.fault.kind == "flood":
            await self._flood(queue, self.fault.flood_bytes)
        decoders = {name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")}
        total = 0
        events = procio.output_events(
            procio.output_fds(proc), exited, chunk=s.chunk_bytes, quiet_s=s.drain_quiet_s, max_drain_s=s.drain_max_s
        )
        async with contextlib.aclosing(events) as stream:
            async for name, data in stream:
                total += len(data)
                if s.output_limit_bytes is not None and total > s.output_limit_bytes and not run.ended_by:
                    run.ended_by = "output_limit"
                    run.kill()
                text = decoders[name].decode(data)
                if text:
                    await queue.put(line({name: text}))
        for name, decoder in decoders.items():
            tail = decoder.decode(b"", final=True)
            if tail:
                await queue.put(line({name: tail}))
        await queue.put(None)

    async def _flood(self, queue: asyncio.Queue[bytes | None], total: int) -> None:
        """``total`` characters of text lines ahead of the command's own output (one shared piece)."""
        text = _FLOOD_LINE * max(1, self.svc.settings.chunk_bytes // len(_FLOOD_LINE))
        piece = line({"stdout": text})
        for _ in range(total // len(text)):
            await queue.put(piece)
        if total % len(text):
            await queue.put(line({"stdout": text[: total % len(text)]}))

    async def _supervise(self, run: ExecRun, proc: BoxProcess, exited: asyncio.Future[Any]) -> None:
        """Enforce the timeout and reap the process, whether or not anyone still reads its output."""
        deadline = time.monotonic() + self.timeout_s
        try:
            while not exited.done():
                if time.monotonic() >= deadline:
                    run.ended_by = run.ended_by or "timeout"
                    run.kill()
                    await asyncio.shield(exited)
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(exited), min(1.0, max(0.01, deadline - time.monotonic())))
        finally:
            self.svc.forget(run)

    def _ending(self, run: ExecRun) -> str | None:
        if run.ended_by == "timeout":
            return f"Command timed out after {self.timeout_s:g} seconds"
        if run.ended_by == "output_limit":
            return f"Command output exceeded the limit of {self.svc.settings.output_limit_bytes} bytes"
        return _ENDINGS.get(run.ended_by or "")

    async def _watch(self, receive: Receive, gone: asyncio.Event) -> None:
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                gone.set()
                return


ROUTES = [Route("/v1/sandboxes/{id}/exec", exec_command, methods=["POST"])]
