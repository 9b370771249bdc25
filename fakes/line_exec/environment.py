"""LineExecEnvironment: a tempdir box whose commands run through the line-exec service over raw TCP.

The box (its directories, state, file sync) is tempdir_box's; only the
command channel differs: each command is one TCP connection to the service
at ``LINE_EXEC_ADDR`` (fakes/line_exec/server.py), or, for
``PooledLineExecEnvironment``, a connection kept for the next command (as an
SSH ControlMaster keeps one).  A connection that ends before the service's
exit line is reported as a failed command (exit 1 with a message saying
so), never sent again: the command may have run.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from typing import IO, Any

from tools.environments.base_output import _ThreadedProcessHandle

from fakes.tempdir_box.environment import TempdirBoxEnvironment

ADDR_VAR = "LINE_EXEC_ADDR"
CONNECT_TIMEOUT_S = 10.0
LOST_EXIT = 1


def service_address() -> tuple[str, int]:
    """(host, port) from LINE_EXEC_ADDR; a clear error when it is unset or malformed."""
    value = os.environ.get(ADDR_VAR, "").strip()
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(
            f"line_exec needs {ADDR_VAR}=HOST:PORT, the line-exec service's address (got {value!r}); "
            "start one with `python -m fakes.line_exec.server` and export what it prints"
        )
    return host.strip("[]"), int(port)


class _Connection:
    """A connection to the service and the reader of its reply lines."""

    def __init__(self, address: tuple[str, int]):
        self.sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
        self.sock.settimeout(None)  # the host bounds the wait (its timeout kills through cancel())
        self.replies: IO[bytes] = self.sock.makefile("rb")

    def close(self) -> None:
        self.replies.close()
        self.sock.close()


class _Pool:
    """At most one idle connection, kept for the next command; a command finding none opens its own."""

    def __init__(self, address: tuple[str, int]):
        self.address = address
        self._idle: _Connection | None = None
        self._lock = threading.Lock()

    def get(self) -> _Connection:
        with self._lock:
            idle, self._idle = self._idle, None
        return idle if idle is not None else _Connection(self.address)

    def put(self, connection: _Connection) -> None:
        with self._lock:
            spare, self._idle = (connection, self._idle) if self._idle is not None else (None, connection)
        if spare is not None:
            spare.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, None
        if idle is not None:
            idle.close()


class _Command:
    """One command: run() blocks until the exit line or the connection's end."""

    def __init__(self, address: tuple[str, int], request: dict[str, Any], lost: Any, pool: _Pool | None = None):
        self.address = address
        self.request = {**request, "keep": pool is not None}
        self.lost = lost
        self.pool = pool
        self._connection: _Connection | None = None
        self._cancelled = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> tuple[str, int]:
        connection = self.pool.get() if self.pool is not None else _Connection(self.address)
        with self._lock:
            self._connection = connection
            cancelled = self._cancelled.is_set()
        if cancelled:
            connection.close()
            return "", 130
        output: list[str] = []
        kept = False
        try:
            connection.sock.sendall(json.dumps(self.request).encode("utf-8", "surrogateescape") + b"\n")
            for line in connection.replies:
                message = json.loads(line)
                if "out" in message:
                    output.append(str(message["out"]))
                elif "exit" in message:
                    if self.pool is not None:
                        self.pool.put(connection)
                        kept = True
                    return "".join(output), int(message["exit"])
        except (OSError, ValueError) as exc:
            return self.lost("".join(output), f"{type(exc).__name__}: {exc}")
        finally:
            if not kept:
                connection.close()
        return self.lost("".join(output), "the service closed the connection")

    def cancel(self) -> None:
        with self._lock:
            self._cancelled.set()
            connection = self._connection
        if connection is not None:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)  # the service kills a command whose client left
            except OSError:
                pass


class LineExecEnvironment(TempdirBoxEnvironment):
    def __init__(self, **kwargs: Any):
        self._address = service_address()
        super().__init__(**kwargs)

    def _run_bash(
        self, cmd_string: str, *, login: bool = False, timeout: int = 120, stdin_data: str | None = None
    ) -> Any:
        refusal = self._refusal()
        if refusal is not None:
            return _ThreadedProcessHandle(lambda: (refusal, 1))
        request = {
            "argv": ["bash", "-l", "-c", cmd_string] if login else ["bash", "-c", cmd_string],
            "cwd": str(self._box.home),
            "env": self._box_env(),
            "stdin": stdin_data,
        }
        command = _Command(self._address, request, self._lost, self._pool())
        return _ThreadedProcessHandle(command.run, command.cancel)

    def _pool(self) -> _Pool | None:
        """The connection pool commands share; none: a connection per command."""
        return None

    def _lost(self, output: str, why: str) -> tuple[str, int]:
        """The connection ended before the exit line: a failed command, said so, never sent again."""
        host, port = self._address
        note = (
            f"line-exec: the connection to {host}:{port} ended before the command's exit status ({why}); "
            "the command may have run and was not sent again"
        )
        return (f"{output}\n{note}" if output else note), LOST_EXIT


class PooledLineExecEnvironment(LineExecEnvironment):
    """Commands share one kept connection to the service (a second opens only while the first is busy)."""

    def __init__(self, **kwargs: Any):
        self._kept = _Pool(service_address())
        super().__init__(**kwargs)

    def _pool(self) -> _Pool | None:
        return self._kept

    def cleanup(self, force_remove: bool = False) -> None:
        self._kept.close()
        super().cleanup(force_remove)
