"""A small client of bridge protocol v1, written here, and the helpers the Cloudflare fake's tests share.

Timings are shortened through ``FAST`` so the modules stay fast.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from fakes.cloudflare import BridgeServer, Settings
from fakes.world import World

FAST = Settings.quick(
    heartbeat_s=0.2,
    kill_grace_s=0.3,
    drain_idle_s=0.3,
    drain_grace_s=0.8,
    hard_deadline_grace_s=0.6,
    failure_grace_s=1.0,
    idle_s=120.0,
    alarm_retry_s=0.5,
)


@dataclass
class Run:
    """One exec: the HTTP answer and, for a stream, every event."""

    status: int
    headers: httpx.Headers
    raw: bytes = b""
    events: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None  # the JSON error body of a non-stream answer

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    @property
    def output(self) -> str:
        return "".join(e["data"] for e in self.events if e["type"] == "output")

    @property
    def exit_code(self) -> int | None:
        last = self.events[-1] if self.events else {}
        return last.get("exit_code") if last.get("type") == "exit" else None

    @property
    def error_code(self) -> str | None:
        if self.error is not None:
            return self.error["error"]["code"]
        last = self.events[-1] if self.events else {}
        return last.get("code") if last.get("type") == "error" else None


class Client:
    def __init__(self, server: BridgeServer, token: str | None = None):
        self.server = server
        self.token = server.token if token is None else token
        self.http = httpx.Client(
            base_url=server.base_url, timeout=30, headers={"Authorization": f"Bearer {self.token}"}
        )

    def close(self) -> None:
        self.http.close()

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx.Response:
        return self.http.post(path, json={} if body is None else body, **kw)

    def init(self, sid: str, persistent: bool = True, **config: Any) -> httpx.Response:
        return self.post(f"/v1/sandboxes/{sid}", {"persistent": persistent, **config})

    def status(self, sid: str) -> httpx.Response:
        return self.http.get(f"/v1/sandboxes/{sid}")

    def cancel(self, sid: str, rid: str) -> httpx.Response:
        return self.post(f"/v1/sandboxes/{sid}/cancel/{rid}")

    def exec(
        self,
        sid: str,
        command: str,
        *,
        rid: str | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        **fields: Any,
    ) -> Run:
        body = {"request_id": rid or uuid.uuid4().hex, "command": command, **fields}
        with self.http.stream("POST", f"/v1/sandboxes/{sid}/exec", json=body) as resp:
            run = Run(resp.status_code, resp.headers)
            if resp.status_code != 200:
                resp.read()
                run.error = resp.json()
                return run
            buffer = b""
            for chunk in resp.iter_raw():
                run.raw += chunk
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    event = json.loads(line)
                    run.events.append(event)
                    if on_event is not None:
                        on_event(event)
            assert not buffer, f"the stream ended inside a line: {buffer[:100]!r}"
        return run


def new_id(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def rid() -> str:
    return uuid.uuid4().hex


def make_server(**overrides: Any) -> BridgeServer:
    return BridgeServer(settings=Settings.quick(**{**_fast_fields(), **overrides})).start()


def _fast_fields() -> dict[str, Any]:
    return {name: getattr(FAST, name) for name in FAST.__dataclass_fields__}


def error_of(resp: httpx.Response) -> tuple[int, str]:
    assert resp.headers.get("cache-control") == "no-store", resp.headers
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    return resp.status_code, body["error"]["code"]


def stopped(client: Client, sid: str) -> bool:
    """The container is stopped and the stop (a lifecycle transition) has finished."""
    status = client.status(sid).json()
    return status["running"] is False and status["busy"] is False


def in_background(fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(fn)
    pool.shutdown(wait=False)
    return future


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def host_pid(world: World, sandbox_id: str, pid: int) -> int | None:
    """This machine's pid of the process a workspace calls ``pid`` ($!): boxes have PID namespaces of their own."""
    box = world.get(sandbox_id)
    return None if box is None else world.host_pid(box, pid)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 :].split()[0] != b"Z"


def exec_in_background(
    client: Client, sid: str, command: str, **fields: Any
) -> tuple[concurrent.futures.Future[Run], threading.Event, str]:
    started = threading.Event()
    request_id = rid()

    def seen(event: dict[str, Any]) -> None:
        if event["type"] == "output":
            started.set()

    other = Client(client.server)
    future = in_background(lambda: other.exec(sid, command, rid=request_id, on_event=seen, **fields))
    assert started.wait(10), "the command never produced output"
    return future, started, request_id
