"""One Hermes command in a bridge workspace, run on its own thread into a StreamProcessHandle.

The thread waits for its place at the workspace's gate, stages oversized
stdin (payload.py), posts the exec with a request id made here, and relays
output events into the handle as they arrive; the handle's pipe blocks when
Hermes reads slowly, so the connection is read no faster than Hermes drains
it.  The exit event sets the return code.

Failures say whether the command ran.  A refusal before the stream means it
did not; then, and only then, the request may be sent again: after
workspace_busy (another operation held the workspace), after
workspace_missing (the workspace is created again, once, and the environment
marked recreated), and after unknown_field for extension fields (the Worker
was redeployed without them).  A stream that breaks or ends without an exit
event is reported as "may have run", a best-effort cancel is sent, and
nothing is retried.  ``stop`` (Hermes's kill) posts the idempotent cancel,
which may reach the Worker before the exec itself.
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from reference.common.redact import redact
from reference.common.stream_handle import StreamProcessHandle

from . import payload
from .client import ExecStream, encode
from .errors import PREFIX, BridgeError, refusal_text, stream_error_text
from .events import EventReader
from .identity import request_id
from .workspace import BUSY_BACKOFF_S, Workspace

logger = logging.getLogger("reference.cloudflare_sandbox")

SERVER_TIMEOUT_MARGIN_S = 5.0  # the Worker's own timeout trails Hermes's, so Hermes reports 124 first
SLOT_GRACE_S = 30.0  # how long past its timeout a command may wait for the workspace
READ_IDLE_S = 60.0  # the Worker sends a heartbeat every 10 s; this much silence is a dead connection
KILL_GRACE_S = 2.0  # after a kill, how long the stream may take to end (the Worker: ms) before it is cut
END_GRACE_S = 5.0  # after the terminal event, how long the body may take to end
STAGE_TIMEOUT_S = 120.0
CANCELLED = 143  # what the supervisor reports for a cancelled command (128 + SIGTERM)
EXIT_CODES = {"hard_timeout": 124, "command_cancelled": CANCELLED}


class StreamFailure(Exception):
    """The stream ended with an error event."""

    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


def server_timeout(timeout: float) -> float:
    return min(900.0, max(0.1, float(timeout) + SERVER_TIMEOUT_MARGIN_S))


class RemoteCommand:
    def __init__(
        self,
        workspace: Workspace,
        command: str,
        stdin: str | None,
        *,
        login: bool,
        timeout: float,
        handle: StreamProcessHandle,
        tmp: str,
        on_recreated: Callable[[], None],
        on_done: Callable[[RemoteCommand], None],
    ):
        self.ws = workspace
        self.command, self.stdin = command, stdin
        self.login = login
        self.timeout = float(timeout or 120)
        self.handle = handle
        self.tmp = tmp
        self._on_recreated = on_recreated
        self._on_done = on_done
        self._cancelled = threading.Event()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._live: str | None = None  # the request id in flight or streaming
        self._stream: ExecStream | None = None
        self._thread: int | None = None  # the command's own thread, whose connection a kill may cut
        self.tag = request_id()

    # -- Hermes's side -------------------------------------------------------------------
    def start(self) -> None:
        threading.Thread(target=self._main, daemon=True, name=f"cf-command-{self.tag[:8]}").start()

    def stop(self) -> None:
        """Hermes killed the command (timeout, interrupt, shutdown); runs on its own thread."""
        self._cancelled.set()
        with self._lock:
            live = self._live
        if live is not None:
            self.ws.cancel(live)
        if not self._done.wait(KILL_GRACE_S):
            self._abort()

    def _abort(self) -> None:
        """Cut the exec's connection: its stream once the response began, else the socket its thread waits on."""
        with self._lock:
            if self._stream is not None:
                self._stream.abort()
            elif self._live is not None and self._thread is not None:
                self.ws.client.cut(self._thread)

    # -- the thread ------------------------------------------------------------------------
    def _main(self) -> None:
        self._thread = threading.get_ident()
        code = 1
        try:
            code = self._run()
        except payload.PayloadTooLarge as exc:
            self._say(f"[{PREFIX}: the command did not run: {exc}]\n")
        except StreamFailure as exc:
            code = EXIT_CODES.get(exc.code, 1)
            self._say(stream_error_text(exc.code, limit=self.ws.features.max_output))
        except BridgeError as exc:
            code = CANCELLED if exc.code == "command_cancelled" else 1
            self._say(refusal_text(exc))
        except Exception as exc:
            logger.error(
                "%s: command in %s failed: %s",
                PREFIX,
                self.ws.id,
                redact(f"{type(exc).__name__}: {exc}", self.ws.secrets),
            )
            self._say(
                f"\n[{PREFIX}: the command failed in the client ({type(exc).__name__}); "
                "it may have run; nothing was retried]\n"
            )
        finally:
            self._done.set()
            self.handle.finish(code)
            self._on_done(self)

    def _say(self, text: str) -> None:
        if not self._cancelled.is_set():  # after a kill Hermes has already answered
            self.handle.feed(redact(text, self.ws.secrets).encode("utf-8"))

    def _run(self) -> int:
        features = self.ws.features
        shared = features.concurrent_exec
        deadline = time.monotonic() + self.timeout + SLOT_GRACE_S
        plan = payload.plan(self.command, self.stdin, tmp=self.tmp, tag=self.tag)
        if not self.ws.gate.enter(
            shared=shared, limit=features.max_concurrent, deadline=deadline, stop=self._cancelled.is_set
        ):
            if self._cancelled.is_set():
                return CANCELLED
            raise BridgeError("workspace_busy", detail="other commands held the workspace past this command's timeout")
        try:
            return self._staged_then_run(plan)
        finally:
            self.ws.gate.leave(shared=shared)

    def _staged_then_run(self, plan: payload.Plan) -> int:
        started = False
        try:
            for upload in plan.uploads:
                collected = bytearray()

                def keep(data: bytes, into: bytearray = collected) -> None:
                    into.extend(data[:4096])

                code = self._exchange(upload.command, upload.stdin, login=False, timeout=STAGE_TIMEOUT_S, sink=keep)
                if code != 0:
                    text = collected.decode("utf-8", "replace").strip()[-300:]
                    raise BridgeError(
                        "staging_failed", detail=f"writing the stdin into the container exited {code}: {text}", ran="no"
                    )
            started = True
            return self._exchange(
                plan.command, plan.stdin, login=self.login, timeout=self.timeout, sink=self.handle.feed
            )
        except BridgeError as exc:
            if plan.staged and (not started or exc.ran == "no"):
                self._remove_staged(plan.staged)
            raise

    def _remove_staged(self, paths: tuple[str, ...]) -> None:
        try:
            self._exchange(
                "rm -f -- " + " ".join(shlex.quote(p) for p in paths),
                None,
                login=False,
                timeout=30.0,
                sink=lambda data: None,
                cancellable=False,
            )
        except Exception:
            logger.info("%s: staged files %s stay in workspace %s", PREFIX, ", ".join(paths), self.ws.id)

    # -- one exec ------------------------------------------------------------------------------
    def _body(self, rid: str, command: str, stdin: str | None, *, login: bool, timeout: float) -> bytes:
        body: dict[str, Any] = {
            "request_id": rid,
            "command": command,
            "timeout": server_timeout(timeout),
            "login": login,
        }
        if stdin is not None:
            body["stdin"] = stdin
        features = self.ws.features
        if features.concurrent_exec:
            body["concurrent"] = True
        if features.large_output:
            body["max_output"] = features.max_output
        return encode(body)

    def _exchange(
        self,
        command: str,
        stdin: str | None,
        *,
        login: bool,
        timeout: float,
        sink: Callable[[bytes], None],
        cancellable: bool = True,
    ) -> int:
        """Run one exec to its exit code; the refusals that prove nothing ran are retried here."""
        rid = request_id()
        deadline = time.monotonic() + timeout + SLOT_GRACE_S
        backoff = iter((*BUSY_BACKOFF_S, *[1.0] * 10_000))
        recreated = refreshed = False
        while True:
            if cancellable and self._cancelled.is_set():
                raise BridgeError("command_cancelled")
            generation = self.ws.recreations
            body = self._body(rid, command, stdin, login=login, timeout=timeout)
            with self._lock:
                self.ws.client.forget()  # what this thread did before is not the exec a kill may cut
                self._live = rid if cancellable else None
            try:
                with self.ws.client.exec_stream(self.ws.id, body, read_timeout=READ_IDLE_S) as stream:
                    with self._lock:
                        self._stream = stream
                    return self._consume(stream, sink)
            except BridgeError as exc:
                if exc.ran != "no":
                    if not self._cancelled.is_set():
                        self.ws.cancel(rid)  # stop whatever may still run there
                    raise
                if exc.code == "workspace_busy" and time.monotonic() < deadline:
                    time.sleep(min(next(backoff), max(0.0, deadline - time.monotonic())))
                    continue
                if exc.code == "workspace_missing" and not recreated:
                    recreated = True
                    try:
                        if self.ws.recreate(generation):
                            self._on_recreated()
                    except BridgeError as again:
                        raise BridgeError(
                            again.code,
                            status=again.status,
                            detail="the workspace was gone and could not be created again",
                        ) from None
                    continue
                if exc.code == "unknown_field" and not refreshed and self.ws.features.names:
                    refreshed = True
                    self.ws.refresh_features()
                    continue
                raise
            finally:
                with self._lock:
                    self._live, self._stream = None, None
                    self.ws.client.forget()

    def _consume(self, stream: ExecStream, sink: Callable[[bytes], None]) -> int:
        reader = EventReader()
        exit_code: int | None = None
        error: str | None = None
        ender: threading.Timer | None = None
        try:
            for chunk in stream.chunks():
                batch = reader.feed(chunk)
                if batch.output:
                    sink("".join(batch.output).encode("utf-8", "surrogatepass"))
                if batch.exit_code is not None or batch.error is not None:
                    exit_code, error = batch.exit_code, batch.error
                    # Only the end of the body is left; do not wait on a server that never sends it.
                    ender = threading.Timer(END_GRACE_S, stream.abort)
                    ender.daemon = True
                    ender.start()
            reader.end()
        except httpx.TransportError:
            if not reader.finished:
                raise  # the exec_stream context reports it as a dropped connection
            logger.info("%s: the stream of %s broke after its terminal event; keeping that event", PREFIX, self.ws.id)
        finally:
            if ender is not None:
                ender.cancel()
        if error is not None:
            raise StreamFailure(error)
        assert exit_code is not None
        return exit_code
