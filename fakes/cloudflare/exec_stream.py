"""The exec response: an NDJSON stream of heartbeat, started, output and a terminal event.

The command runs in a ``CommandRun`` thread that hands events to the event loop;
this ASGI callable batches whatever is queued into one write, adds a heartbeat
every ``heartbeat_s`` for the whole stream, applies stream faults, and treats a
client that goes away as a cancel (SIGTERM to the command), as the Worker does.
At most ``OUTPUT_CREDITS`` output events wait for the socket: a client that reads
slowly slows the command down (its pipe fills) instead of growing the queue, as
the Worker's streams do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

from starlette.types import Receive, Scope, Send

from fakes.delivery import Delivery
from fakes.faults import Fault

from .protocol import ExecRequest, WorkspaceConfig
from .supervisor import CommandRun, Event
from .workspace import Active, Workspace

STREAM_HEADERS = [
    (b"content-type", b"application/x-ndjson"),
    (b"cache-control", b"no-store"),
    (b"x-content-type-options", b"nosniff"),
]
TERMINAL = ("exit", "error")
OUTPUT_CREDITS = 64  # output events (at most 4096 units each) queued ahead of the socket


def encode(event: Event) -> bytes:
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


class ExecStream:
    def __init__(
        self, ws: Workspace, active: Active, request: ExecRequest, config: WorkspaceConfig, fault: Fault | None
    ):
        self.ws = ws
        self.active = active
        self.request = request
        self.config = config
        self.fault = fault

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event] = asyncio.Queue()
        credits = threading.Semaphore(OUTPUT_CREDITS)
        stopped = threading.Event()
        closing = self.ws.bridge.closing

        def emit(event: Event) -> None:
            if event.get("type") == "output":
                while not credits.acquire(timeout=0.1):  # the command waits for the client
                    if stopped.is_set() or closing.is_set():
                        return  # nobody will read it
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
                loop.call_soon_threadsafe(queue.put_nowait, event)

        flood = self.fault.flood_bytes if self.fault is not None and self.fault.kind == "flood" else 0
        run = CommandRun(self.ws, self.active, self.request, self.config, emit, flood_bytes=flood)
        gone = asyncio.Event()
        delivery = Delivery(send, receive, self.fault, self.ws.bridge.closing, gone)
        try:
            await delivery.start(200, STREAM_HEADERS)
        except BaseException:
            self.ws.finish(self.active)
            raise
        run.start()
        watcher = asyncio.create_task(self._watch(receive, gone, run))
        beats = asyncio.create_task(self._heartbeats(queue))
        finished = False
        try:
            while not finished and not gone.is_set():
                batch = [await queue.get()]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                for i, event in enumerate(batch):
                    if event.get("type") in TERMINAL:
                        batch, finished = batch[: i + 1], True
                        break
                await delivery.body(b"".join(encode(e) for e in batch))
                for _ in range(sum(1 for e in batch if e.get("type") == "output")):
                    credits.release()
            if finished and not gone.is_set():
                await delivery.end()
        finally:
            stopped.set()
            beats.cancel()
            watcher.cancel()
            if not finished:
                run.client_gone()

    async def _heartbeats(self, queue: asyncio.Queue[Event]) -> None:
        interval = self.ws.settings.heartbeat_s
        while True:
            await asyncio.sleep(interval)
            queue.put_nowait({"type": "heartbeat"})

    async def _watch(self, receive: Receive, gone: asyncio.Event, run: CommandRun) -> None:
        while True:
            message = await receive()
            if message.get("type") == "http.disconnect":
                gone.set()
                run.client_gone()
                return
