"""A tiny exec service over raw TCP: commands answered in JSON lines.

A connection opens with the server's greeting, ``{"hello": "line-exec",
"pad": "..."}`` (a few KiB: the talk a protocol has before any command, as an
SSH key exchange).  The client then sends one line, ``{"argv": [...], "cwd":
"...", "env": {...}, "stdin": "..." | null, "keep": false}``; the server
starts ``argv`` in a session of its own and answers ``{"out": "..."}`` lines
as output arrives, then ``{"exit": N}`` (a signal's death is 128 + its
number).  With ``"keep": true`` the connection then takes the next command,
as a multiplexed SSH connection does; otherwise the server closes it.  A
client that leaves before the exit line takes its command with it: the
command's process group is killed, as a remote shell's session ends with its
connection.

It is the kit's stand-in for a service reached over a protocol of its own (a
vendor's wire protocol, SSH), in front of which ``--client-faults
tcp:HOST:PORT`` puts the kit's TCP fault proxy.  Run it by hand with
``python -m fakes.line_exec.server``; it prints its address.
"""

from __future__ import annotations

import codecs
import json
import os
import select
import signal
import socket
import socketserver
import subprocess
import threading
from typing import Any

CHUNK = 64 * 1024
REQUEST_LIMIT = 16 * 1024 * 1024
DRAIN_S = 0.1  # after the command exits, how long output of jobs it left running may still arrive
GREETING_PAD = 3 * 1024  # the greeting's filler: more than the 2 KiB a dropped-connection check lets pass
WATCH_S = 0.1  # how often a running command's connection is looked at for its client leaving


class _Handler(socketserver.StreamRequestHandler):
    server: LineExecServer

    def handle(self) -> None:
        self.server.count()
        try:
            self._send({"hello": "line-exec", "pad": "." * GREETING_PAD})
            if self.server.hello_pause_s:
                threading.Event().wait(self.server.hello_pause_s)  # a slow handshake: nothing moves
            while self._one():
                pass
        except OSError:
            pass

    def _one(self) -> bool:
        """Run the connection's next command; True when the connection takes another."""
        line = self.rfile.readline(REQUEST_LIMIT)
        if not line:
            return False
        try:
            request = json.loads(line)
            argv = [str(a) for a in request["argv"]]
        except (ValueError, KeyError, TypeError):
            self._send({"out": "line-exec: the request is not a JSON line with argv\n"})
            self._send({"exit": 2})
            return False
        stdin = request.get("stdin")
        try:
            proc = subprocess.Popen(
                argv,
                cwd=request.get("cwd") or None,
                env={str(k): str(v) for k, v in (request.get("env") or {}).items()},
                start_new_session=True,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except OSError as exc:
            self._send({"out": f"line-exec: cannot start {argv[0]!r}: {exc}\n"})
            self._send({"exit": 127})
            return bool(request.get("keep"))
        done = threading.Event()
        if stdin is not None:
            threading.Thread(target=_feed, args=(proc, str(stdin)), daemon=True).start()
        threading.Thread(target=self._watch, args=(proc, done), daemon=True).start()
        try:
            self._stream(proc)
            code = proc.wait()
            done.set()  # from here the client may leave: the command is over
            self._send({"exit": 128 - code if code < 0 else code})
        except OSError:
            _kill(proc)  # the client is gone: so is its command
            return False
        finally:
            done.set()
            if proc.stdout is not None:
                proc.stdout.close()
        if request.get("keep"):
            return True
        self.connection.shutdown(socket.SHUT_RDWR)  # the reply is whole
        return False

    def _stream(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        while True:
            ready, _, _ = select.select([fd], [], [], DRAIN_S)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            data = os.read(fd, CHUNK)
            if not data:
                break
            text = decoder.decode(data)
            if text:
                self._send({"out": text})
        rest = decoder.decode(b"", final=True)
        if rest:
            self._send({"out": rest})

    def _watch(self, proc: subprocess.Popen[bytes], done: threading.Event) -> None:
        """The client leaving before the exit line ends the command.  Bytes are only peeked at: the
        next request of a kept connection is the handler's."""
        sock = self.connection
        while not done.is_set():
            if not select.select([sock], [], [], WATCH_S)[0]:
                continue
            try:
                gone = not sock.recv(1, socket.MSG_PEEK)
            except OSError:
                gone = True
            if not gone:
                return  # the client spoke while its command runs: only its leaving would end it
            if not done.is_set():
                _kill(proc)
            return

    def _send(self, message: dict[str, Any]) -> None:
        self.wfile.write(json.dumps(message).encode("utf-8", "surrogateescape") + b"\n")
        self.wfile.flush()


def _feed(proc: subprocess.Popen[bytes], data: str) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data.encode("utf-8", "surrogateescape"))
    except (OSError, UnicodeEncodeError):
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class LineExecServer(socketserver.ThreadingTCPServer):
    """The service on 127.0.0.1 (an ephemeral port unless given); ``connections`` counts what it accepted."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int = 0, *, hello_pause_s: float = 0.0):
        super().__init__(("127.0.0.1", port), _Handler)
        self.hello_pause_s = hello_pause_s  # how long the greeting waits before the first command is read
        host, bound = self.socket.getsockname()[:2]
        self.address = f"{host}:{bound}"  # what LINE_EXEC_ADDR names
        self.connections = 0
        self._count_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def count(self) -> None:
        with self._count_lock:
            self.connections += 1

    def start(self) -> LineExecServer:
        self._thread = threading.Thread(target=self.serve_forever, daemon=True, name="line-exec-server")
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def main() -> None:
    server = LineExecServer()
    print(f"line-exec server on {server.address} (LINE_EXEC_ADDR={server.address}); Ctrl-C stops it", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
