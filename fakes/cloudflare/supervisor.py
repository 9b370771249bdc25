"""One exec, from cold start to the terminal event: the Worker's command stream and
the container's ``hermes-exec`` supervisor, run in one server thread.

The thread starts the container if needed, launches bash in its own process
group, writes stdin once and closes it, relays the merged output as ``output``
events (UTF-8 decoded with replacement, at most 4096 UTF-16 units each, never
splitting a surrogate pair), and enforces:

- the command timeout: SIGTERM to the group, SIGKILL ``kill_grace_s`` later,
  exit 124; a forwarded signal (cancel, client gone) does the same and exits
  128 + N;
- the background drain after a normal exit: output until ``drain_idle_s`` of
  quiet, at most ``drain_grace_s``; background jobs keep running;
- the output limit (``output_limit`` error, never truncation), the hard
  deadline (``hard_timeout`` after killing the group by id), and container
  loss (``workspace_lost``).

Events go out through ``emit``; the terminal one only after the workspace's
foreground slot is free, so a client that saw ``exit`` may send the next
command at once.
"""

from __future__ import annotations

import codecs
import logging
import math
import os
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from fakes.world import BoxProcess

from .protocol import ApiError, ExecRequest, WorkspaceConfig
from .settings import MAX_FRAME_UNITS
from .workspace import Active, Workspace

logger = logging.getLogger("fakes.cloudflare")

Event = dict[str, Any]
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_CHUNK = 65536
_FLOOD_LINE = b"flood flood flood flood flood flood flood flood flood flood flood flood\n"


def utf16_units(text: str) -> int:
    if text.isascii():  # constant time: CPython keeps whether a str is ASCII
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def frames(text: str, limit: int = MAX_FRAME_UNITS) -> Iterator[str]:
    """Cut ``text`` into pieces of at most ``limit`` UTF-16 units, whole code points only."""
    if text.isascii() or not _ASTRAL.search(text):
        for i in range(0, len(text), limit):
            yield text[i : i + limit]
        return
    start, units = 0, 0
    for i, char in enumerate(text):
        width = 2 if ord(char) > 0xFFFF else 1
        if units + width > limit:
            yield text[start:i]
            start, units = i, 0
        units += width
    if start < len(text):
        yield text[start:]


def group_alive(pgid: int) -> bool:
    """A live (non-zombie) member of the process group exists."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = []
    if not entries:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != b"Z" and int(fields[2]) == pgid:
            return True
    return False


def _group_alive(proc: BoxProcess) -> bool:
    """group_alive for a command's own group only: after its reaping the id may be recycled."""
    return proc.owns_group() and group_alive(proc.pid)


class CommandRun:
    def __init__(
        self,
        ws: Workspace,
        active: Active,
        request: ExecRequest,
        config: WorkspaceConfig,
        emit: Callable[[Event], None],
        *,
        flood_bytes: int = 0,
    ):
        self.ws = ws
        self.active = active
        self.request = request
        self.config = config
        self.emit = emit
        self.flood_bytes = flood_bytes
        self.settings = ws.settings
        self.units = 0
        self.generation = -1
        self.hard_at = math.inf
        self._fds: dict[int, Any] = {}
        self._writer: threading.Thread | None = None

    # -- entry points --------------------------------------------------------------------
    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run, name=f"cf-exec-{self.request.request_id[:8]}", daemon=True)
        thread.start()
        return thread

    def client_gone(self) -> None:
        """The stream's reader went away: cancel the command as the Worker does."""
        self.active.cancelled = True
        self.active.signal = self.active.signal or signal.SIGTERM

    def run(self) -> None:
        terminal: Event = {"type": "error", "code": "exec_failed"}
        try:
            terminal = {"type": "exit", "exit_code": self._run()}
        except ApiError as exc:
            terminal = {"type": "error", "code": exc.code}
        except Exception:
            logger.exception("exec %s failed", self.request.request_id)
        finally:
            self._close_fds()
            self.ws.finish(self.active)
            self.emit(terminal)

    # -- the command -----------------------------------------------------------------------
    def _run(self) -> int:
        box, self.generation = self.ws.ensure_running(self.config)
        if self.active.cancelled:
            raise ApiError(409, "command_cancelled", "Command cancelled")
        self.hard_at = time.monotonic() + self.request.timeout + self.settings.hard_deadline_grace_s
        proc = self.ws.launch(box, self.request, self.config)
        self.emit({"type": "started", "request_id": self.request.request_id})
        try:
            return self._supervise(proc)
        except ApiError:
            self._stop_after_failure(proc)
            raise

    def _supervise(self, proc: BoxProcess) -> int:
        s = self.settings
        decoder_out = codecs.getincrementaldecoder("utf-8")("replace")
        decoder_err = codecs.getincrementaldecoder("utf-8")("replace")
        stdout, stderr = proc.outputs()
        for pipe, decoder in ((stdout, decoder_out), (stderr, decoder_err)):
            os.set_blocking(pipe.fileno(), False)
            self._fds[pipe.fileno()] = (pipe, decoder)
        self._feed_stdin(proc)
        if self.flood_bytes:
            self._flood()
        deadline = time.monotonic() + self.request.timeout
        stopping, sent, escalate_at = False, 0, math.inf
        while proc.popen.poll() is None:
            self._pump(proc, s.poll_s)
            self._check(proc)
            now = time.monotonic()
            if self.ws.stalled:
                continue  # a wedged supervisor: only the hard deadline ends this
            if not stopping and (self.active.signal or now >= deadline):
                stopping, sent = True, self.active.signal
                proc.signal(sent or signal.SIGTERM)
                escalate_at = now + s.kill_grace_s
            elif stopping and now >= escalate_at:
                proc.signal(signal.SIGKILL)
                escalate_at = now + s.kill_grace_s
        status = proc.poll()
        if stopping:
            # bash is gone; the rest of its group gets what is left of the grace.
            while _group_alive(proc) and time.monotonic() < escalate_at:
                self._pump(proc, s.poll_s)
                self._check(proc)
            proc.signal(signal.SIGKILL)
            self._drain_buffered()
            received = self.active.signal  # a cancel during a timeout's escalation still counts
            code = 128 + received if received else 124
        else:
            self._drain_buffered()
            start = time.monotonic()
            quiet_until, last = start + s.drain_idle_s, self.units
            while self._fds and not self.active.signal:
                now = time.monotonic()
                if now >= quiet_until or now >= start + s.drain_grace_s:
                    break
                self._pump(proc, min(s.poll_s, quiet_until - now))
                self._check(proc)
                if self.units != last:
                    last, quiet_until = self.units, time.monotonic() + s.drain_idle_s
            code = status if status is not None else 1
        self._check(proc)
        self._finish_decoders()
        if self._writer is not None:
            self._writer.join(s.drain_grace_s)
        return code

    def _check(self, proc: BoxProcess) -> None:
        if self.ws.lost(self.generation):
            raise ApiError(409, "workspace_lost", "Container stopped during the command")
        if time.monotonic() >= self.hard_at:
            # Stop only this command's group; the workspace and its files stay.
            self.active.cancelled = True
            proc.signal(signal.SIGKILL)
            raise ApiError(504, "hard_timeout", "Command stopped at hard deadline")

    def _stop_after_failure(self, proc: BoxProcess) -> None:
        """SIGTERM the group, wait for it, then kill it by id; a dead container needs nothing."""
        if self.ws.lost(self.generation):
            return
        s = self.settings
        if not self.ws.stalled:
            proc.signal(signal.SIGTERM)
        give_up = time.monotonic() + s.failure_grace_s
        escalate_at = time.monotonic() + s.kill_grace_s
        while time.monotonic() < give_up and (proc.popen.poll() is None or _group_alive(proc)):
            if not self.ws.stalled and time.monotonic() >= escalate_at:
                proc.signal(signal.SIGKILL)
            self._discard(s.poll_s)
        proc.signal(signal.SIGKILL)
        try:
            proc.popen.wait(timeout=1)
        except subprocess.TimeoutExpired:
            pass

    # -- pipes ------------------------------------------------------------------------------
    def _feed_stdin(self, proc: BoxProcess) -> None:
        pipe = proc.pipes()[0]
        if self.request.stdin is None:
            pipe.close()
            return
        data = self.request.stdin.encode("utf-8")

        def write() -> None:
            try:
                view = memoryview(data)
                while view:
                    written = pipe.write(view)
                    view = view[written or 0 :]
            except (OSError, ValueError):
                pass  # the command closed stdin early; its exit status decides
            finally:
                try:
                    pipe.close()
                except OSError:
                    pass

        self._writer = threading.Thread(target=write, name="cf-stdin", daemon=True)
        self._writer.start()

    def _pump(self, proc: BoxProcess, wait_s: float) -> None:
        """Relay whatever output arrives within ``wait_s``."""
        if not self._fds:
            if proc.popen.poll() is not None:
                time.sleep(max(wait_s, 0))  # only the rest of the group is left: just wait
                return
            try:
                proc.popen.wait(timeout=max(wait_s, 0.001))  # returns as soon as bash exits
            except subprocess.TimeoutExpired:
                pass
            return
        ready, _, _ = select.select(list(self._fds), [], [], max(wait_s, 0))
        for fd in ready:
            self._read(fd)

    def _read(self, fd: int) -> int:
        pipe, decoder = self._fds[fd]
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return 0
        except OSError:
            data = b""
        if not data:
            self._output(decoder.decode(b"", final=True))
            del self._fds[fd]
            pipe.close()
            return 0
        self._output(decoder.decode(data))
        return len(data)

    def _drain_buffered(self) -> None:
        """Deliver what the pipes hold right now (until they would block or end)."""
        for fd in list(self._fds):
            while fd in self._fds and self._read(fd) > 0:
                pass

    def _discard(self, wait_s: float) -> None:
        """Keep the pipes flowing without sending anything (after a failure)."""
        if not self._fds:
            time.sleep(wait_s)
            return
        ready, _, _ = select.select(list(self._fds), [], [], wait_s)
        for fd in ready:
            try:
                if not os.read(fd, _CHUNK):
                    self._fds.pop(fd)[0].close()
            except BlockingIOError:
                pass
            except OSError:
                self._fds.pop(fd)[0].close()

    def _finish_decoders(self) -> None:
        for fd in list(self._fds):
            pipe, decoder = self._fds.pop(fd)
            self._output(decoder.decode(b"", final=True))
            pipe.close()

    def _close_fds(self) -> None:
        for pipe, _ in self._fds.values():
            try:
                pipe.close()
            except OSError:
                pass
        self._fds.clear()

    def _flood(self) -> None:
        """A scripted flood: this many more bytes of output, as if the command wrote them."""
        block = _FLOOD_LINE * (_CHUNK // len(_FLOOD_LINE))
        left = self.flood_bytes
        while left > 0:
            piece = block[:left]
            self._output(piece.decode("ascii"))
            left -= len(piece)

    def _output(self, text: str) -> None:
        if not text:
            return
        self.units += utf16_units(text)
        if self.units > self.request.max_output:
            # File tools need full-fidelity data: fail, never truncate.
            raise ApiError(413, "output_limit", "Command output exceeded the bridge limit")
        for piece in frames(text):
            self.emit({"type": "output", "data": piece})
