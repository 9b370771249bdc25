"""Run one command in a sandbox and hand its output to Hermes as it arrives.

``Sandbox.exec`` of deepinfra 0.3.0 reads the whole NDJSON stream into memory
before it returns (a streaming exec is on the SDK's roadmap).  Hermes needs
output while the command runs and bounded memory for floods, so this sends the
same exec request through the SDK's own client (``DeepInfraClient.stream``:
its auth, error mapping and timeouts) and relays each line into a
StreamProcessHandle.  When Hermes reads slower than output arrives, the
handle's pipe fills, this thread stops reading the response, and TCP
backpressure slows the command down: nothing is dropped, nothing piles up.

The sandbox's state is learnt from the exec's own answer, never read before
a command: a 404 (gone) or 409 (not running) arrives before anything ran, so
the environment's recovery resumes or replaces the sandbox and the command is
sent once more; any other failure is reported, never retried (it may have run).
The body is read to its end after the terminal line, so every command of a
session goes over the same connection.

Stopping a command (Hermes's timeout or an interrupt) runs the launcher's
killer through a second exec, which kills only that command's process group;
only if that fails does the whole sandbox get stopped (the next command
resumes it).  Everything runs on threads, never on Hermes's.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

from reference.common.redact import redact
from reference.common.stream_handle import StreamProcessHandle
from reference.deepinfra.launcher import Launch, killer
from reference.deepinfra.sandboxes import Account, CommandRefused
from reference.deepinfra.settings import MAX_COMMAND_S

logger = logging.getLogger("reference.deepinfra")

SERVER_GRACE_S = 30  # the service's own timeout trails Hermes's, as a backstop
HTTP_GRACE_S = 30.0  # the read timeout trails the service's timeout, so its kill arrives as a line
KILL_GRACE_S = 3.0  # after the killer ran, the stream should end within this
KILL_ATTEMPTS = 2
TAIL_S = 2.0  # after the terminal line the body should end at once; past this its connection is dropped
LOST = (
    "\n[deepinfra: the exec stream ended without an exit status (connection lost or service error); "
    "the command's outcome is unknown]\n"
)


def server_timeout(timeout_s: float) -> int:
    return int(min(max(1, int(timeout_s)) + SERVER_GRACE_S, MAX_COMMAND_S))


class CommandRun:
    """One command: the exec request, its stream relayed into a handle, its kill.

    ``recover`` is the environment's answer to a request the service refused before it started
    anything (404: the sandbox is gone; 409: it is not running): it brings the sandbox back and
    returns the one to send the command to, or raises ``CommandRefused``.  The command is sent
    again once, only then: a refusal proves it never ran.  None: no second attempt.
    """

    def __init__(
        self,
        account: Account,
        sandbox: Any,
        launch: Launch,
        timeout_s: float,
        recover: Callable[[BaseException, str], Any] | None = None,
        settled: Callable[[int, str | None], None] | None = None,
    ):
        self.account = account
        self.sandbox = sandbox
        self.launch = launch
        self.timeout_s = server_timeout(timeout_s)
        self.asked_s = timeout_s
        self.recover = recover
        self.settled = settled  # told the outcome (exit status, note) once it is known
        self.handle = StreamProcessHandle(stop=self._stop)
        self.done = self.handle.ended
        self._response: Any = None
        self._settled = False

    def start(self) -> StreamProcessHandle:
        threading.Thread(target=self._pump, daemon=True, name=f"deepinfra-{self.launch.run_id}").start()
        return self.handle

    # -- the stream ------------------------------------------------------------------------
    def _request(self) -> Any:
        from deepinfra import RequestSpec

        return RequestSpec(
            "POST",
            f"/v1/sandboxes/{quote(self.sandbox.id, safe='')}/exec",
            json={"command": self.launch.argv, "timeout_seconds": self.timeout_s},
            timeout=self.timeout_s + HTTP_GRACE_S,
        )

    def _pump(self) -> None:
        import deepinfra

        code, note = 1, None
        try:
            try:
                self._send()
            except (deepinfra.ConflictError, deepinfra.NotFoundError) as exc:
                if self.recover is None or self.handle.killed:
                    raise
                self.sandbox = self.recover(exc, str(self.sandbox.id))
                self._send()
        except CommandRefused as exc:
            note = f"\n[{exc}]\n"
        except deepinfra.ContentTooLargeError:
            note = (
                "\n[deepinfra: stdin is larger than the 100 MiB a sandbox file transfer allows;"
                " the command did not run]\n"
            )
        except deepinfra.ConflictError as exc:
            note = (
                f"\n[deepinfra: sandbox {self.sandbox.id} is not running ({exc.message}); the command did not "
                "run. The next command resumes the sandbox.]\n"
            )
        except deepinfra.NotFoundError:
            note = (
                f"\n[deepinfra: sandbox {self.sandbox.id} no longer exists; the command did not run. The next "
                "command runs in a new sandbox.]\n"
            )
        except Exception as exc:  # transport errors, API errors, a stream cut short
            if not self.handle.killed:
                note = f"\n[deepinfra: the command failed in the service: {redact(exc, self.account.secrets)}]\n"
        finally:
            self._settle(code, note)

    def _settle(self, code: int, note: str | None) -> None:
        """The command's outcome, handed to Hermes once."""
        if self._settled:
            return
        self._settled = True
        if self.settled is not None:
            try:  # a killed command's outcome is a kill, whatever its status says
                self.settled(code, note or ("killed" if self.handle.killed else None))
            except Exception:
                logger.debug("the outcome's listener failed", exc_info=True)
        if note and not self.handle.killed:
            self.handle.feed(note.encode())
        self.handle.finish(code)

    def _send(self) -> None:
        """Stage stdin, send the exec and relay its stream; the outcome is settled at the terminal line."""
        started = time.monotonic()
        if self.launch.staged is not None:
            self.sandbox.fs.write(self.launch.staged_path, self.launch.staged)
        with self.account.client.stream(self._request()) as response:
            self._response = response
            self._relay(response, started)

    def _relay(self, response: Any, started: float) -> None:
        """Feed output lines to the handle and settle at the terminal line; then read the body to its end
        (briefly), so the connection goes back to the pool for the next command instead of being dropped."""
        lines = response.iter_lines()
        for raw in lines:
            text = raw.strip()
            if not text:
                continue
            try:
                event = json.loads(text)
            except ValueError:
                logger.debug("skipping an unreadable exec stream line of %d characters", len(text))
                continue
            if not isinstance(event, dict) or not event:
                continue  # {} is a heartbeat
            for stream in ("stdout", "stderr"):
                piece = event.get(stream)
                if isinstance(piece, str) and piece:
                    self.handle.feed(piece.encode("utf-8", "surrogatepass"))
            if "returncode" in event:
                try:
                    self._settle(int(event["returncode"]), None)
                except (TypeError, ValueError):
                    self._settle(1, LOST)
                break
            if "error" in event:
                self._settle(*self._ended_by_service(str(event["error"]), time.monotonic() - started))
                break
        else:
            self._settle(1, LOST)
            return
        _read_to_end(response, lines)

    def _ended_by_service(self, message: str, elapsed: float) -> tuple[int, str]:
        if elapsed >= self.timeout_s - 1:
            if self.timeout_s >= MAX_COMMAND_S:
                return 124, (
                    "\n[deepinfra: DeepInfra stops every command after 30 minutes and stopped this one "
                    f"({message}). Run longer work in the background (nohup ... &) and poll it.]\n"
                )
            return 124, f"\n[deepinfra: the service stopped the command at its timeout ({message})]\n"
        return 1, f"\n[deepinfra: the service ended the command: {message}]\n"

    # -- stopping one command ---------------------------------------------------------------
    def _stop(self) -> None:
        """Kill this command's process group through a second exec; stop the sandbox only if that fails."""
        for _ in range(KILL_ATTEMPTS):
            if self.done.is_set():
                return
            try:
                result = self.sandbox.exec(*killer(self.launch.run_id), timeout=20)
                if result.returncode == 0 and self.done.wait(KILL_GRACE_S):
                    return
            except Exception as exc:
                logger.info("killing command %s failed: %s", self.launch.run_id, redact(exc, self.account.secrets))
            if self.done.wait(0.2):
                return
        if self.done.is_set():
            return
        logger.warning(
            "command %s in sandbox %s could not be killed on its own; stopping the sandbox "
            "(the next command resumes it)",
            self.launch.run_id,
            self.sandbox.id,
        )
        self.account.stop(self.sandbox)
        response = self._response
        if response is not None and not self.done.wait(KILL_GRACE_S):
            try:
                response.close()
            except Exception:
                pass


class _Tails:
    """Exec bodies read to their end after their terminal line, each closed when it has not ended within
    TAIL_S (its connection is then dropped, not pooled).  One watcher thread for the process, started when
    a body is watched and ending after IDLE_S with none: no thread per command."""

    IDLE_S = 10.0
    TICK_S = 0.5

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watched: dict[int, tuple[float, Any]] = {}
        self._next = 0
        self._thread: threading.Thread | None = None

    def watch(self, response: Any) -> int:
        with self._lock:
            key, self._next = self._next, self._next + 1
            self._watched[key] = (time.monotonic() + TAIL_S, response)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="deepinfra-tails")
                self._thread.start()
        return key

    def done(self, key: int) -> None:
        with self._lock:
            self._watched.pop(key, None)

    def _run(self) -> None:
        idle_since = time.monotonic()
        while True:
            time.sleep(self.TICK_S)
            now = time.monotonic()
            with self._lock:
                late = [key for key, (deadline, _) in self._watched.items() if deadline <= now]
                closing = [self._watched.pop(key)[1] for key in late]
                if self._watched:
                    idle_since = now
                elif now - idle_since >= self.IDLE_S:
                    self._thread = None
                    return
            for response in closing:
                try:
                    response.close()
                except Exception:
                    pass


_tails = _Tails()


def _read_to_end(response: Any, lines: Iterator[Any]) -> None:
    """What is left of an exec body after its terminal line (its end, normally), within TAIL_S: a body
    read to its end returns its connection to the client's pool."""
    key = _tails.watch(response)
    try:
        for _ in lines:
            pass
    except Exception:
        pass  # closed for being late, or the connection went: the next request opens another
    finally:
        _tails.done(key)
