"""The client side of a box daemon's control socket (see ``daemon``).

``request(socket, message)`` sends one request and returns the answer
(ping, processes, signal, stop); ``frozen(socket)`` holds the box frozen for a
block, on a connection of its own.  ``BoxCommand`` runs a command
in the box; it is an ``isolation.BoxPopen`` (the engine's Popen of a command
started elsewhere), so a ``subprocess.Popen``: ``pid`` (its host pid),
``box_pid``, ``poll()``, ``wait(timeout)``, ``communicate()``, ``stdin`` /
``stdout`` / ``stderr`` when ``subprocess.PIPE`` is asked, ``send_signal()``,
``terminate()`` and ``kill()``.  A signal reaches the command's whole tree in
the box (its session and every descendant), not just its first process.
The exit status arrives on the command's own connection to the daemon; if the
daemon dies that connection closes, the engine has ended every process of the
box, and ``wait`` returns ``-SIGKILL`` at once instead of hanging.

With ``tty=True`` the command runs on a terminal of the box's own; the client
gets its master (``BoxCommand.pty``) and ``interact()`` relays it to the
caller's terminal (``hermes-box enter``).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from isolation import BoxPopen
from isolation.box_init import Channel
from isolation.popen import ExitSlot
from reference.box_lite.errors import BoxNotRunning, ControlError

CONNECT_TIMEOUT_S = 5.0
REPLY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


@contextlib.contextmanager
def socket_address(path: Path) -> Any:
    """``path`` as an AF_UNIX address: itself, or (longer than the 107 bytes an address holds, as in a
    deep temp home) the same file named through a descriptor of its directory, valid for the block."""
    if len(os.fsencode(str(path))) < 100:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def connect(path: Path, name: str = "", timeout: float = CONNECT_TIMEOUT_S) -> socket.socket:
    """A connection to the daemon listening on ``path``; BoxNotRunning when none listens there."""
    label = name or path.parent.name
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    sock.settimeout(timeout)
    try:
        with socket_address(path) as address:
            sock.connect(address)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        sock.close()
        raise BoxNotRunning(
            f"box {label} is not running", "its daemon does not answer", f"start it: hermes-box start {label}"
        ) from exc
    except OSError as exc:
        sock.close()
        raise ControlError(f"cannot reach box {label}'s daemon", str(exc), "see hermes-box doctor " + label) from exc
    return sock


def request(path: Path, message: dict[str, Any], *, name: str = "", timeout: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
    """Send one request and return the daemon's answer; ControlError if it refuses or goes away."""
    label = name or path.parent.name
    with connect(path, label) as sock:
        sock.settimeout(timeout)
        return _exchange(Channel(sock), message, label, timeout)


def _exchange(channel: Channel, message: dict[str, Any], label: str, timeout: float) -> dict[str, Any]:
    try:
        channel.send(message)
        answer = channel.receive()
    except TimeoutError as exc:
        raise ControlError(
            f"box {label}'s daemon did not answer {message.get('op')!r} within {timeout:.0f} s",
            "it is busy or stuck",
            f"see its log, or stop the box: hermes-box stop {label}",
        ) from exc
    except OSError as exc:
        raise ControlError(f"box {label}'s daemon went away", str(exc), f"hermes-box doctor {label}") from exc
    for fd in channel.take_fds(64):
        os.close(fd)
    if answer is None:
        raise ControlError(
            f"box {label}'s daemon closed the connection on {message.get('op')!r}",
            "it stopped or died",
            f"hermes-box doctor {label}",
        )
    if answer.get("op") == "error":
        raise ControlError(f"box {label} refused {message.get('op')!r}", str(answer.get("message")), "")
    return answer


@contextlib.contextmanager
def frozen(path: Path, *, name: str = "", workload: bool = False) -> Iterator[None]:
    """Every process of the box stopped for the block, on a connection held open for it: the daemon
    continues them when the block ends, or as soon as this connection drops (whoever froze the box
    died), so a freeze never outlives its holder.  A command started meanwhile waits for the thaw.
    With ``workload``, the box's supervised workload is first ended (not paused: it starts again
    at the thaw, or when the connection drops)."""
    label = name or path.parent.name
    with connect(path, label) as sock:
        sock.settimeout(REPLY_TIMEOUT_S)
        channel = Channel(sock)
        _exchange(channel, {"op": "freeze", "workload": workload}, label, REPLY_TIMEOUT_S)
        try:
            yield
        finally:
            with contextlib.suppress(ControlError):
                _exchange(channel, {"op": "thaw"}, label, REPLY_TIMEOUT_S)


def connect_inside(path: Path, port: int, *, name: str = "", timeout: float = CONNECT_TIMEOUT_S) -> socket.socket:
    """A TCP connection to ``127.0.0.1:port`` in the box's network namespace, made by its daemon (an
    OSError when nothing listens there or the daemon refuses)."""
    label = name or path.parent.name
    with connect(path, label, timeout) as sock:
        sock.settimeout(timeout + 1.0)
        channel = Channel(sock)
        channel.send({"op": "connect", "port": int(port), "timeout": timeout})
        answer = channel.receive()
        fds = channel.take_fds(int((answer or {}).get("nfds") or 0))
        if answer is None or answer.get("op") != "connected" or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            why = str(answer.get("message")) if answer else "the daemon closed the connection"
            raise ConnectionRefusedError(why)
        return socket.socket(fileno=fds[0])


def stop(path: Path, *, name: str = "", grace: float = 0.0, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Ask the daemon to stop its box (SIGTERM to its processes, ``grace`` s for them to exit, then the
    end of the box); True once it answered that every box process has ended."""
    answer = request(path, {"op": "stop", "grace": grace}, name=name, timeout=timeout + grace)
    return bool(answer.get("clean"))


class _CommandLink(ExitSlot):
    """A command's connection to the box's daemon: its exit status comes on it (the connection closing
    first, the daemon's death, counts as SIGKILL: the engine has ended every process of the box), and
    signal requests go out on it, which the daemon sends to the command's whole tree."""

    def __init__(self, channel: Channel, box_pid: int, host_pid: int) -> None:
        self._send_lock = threading.Lock()  # sending a signal vs closing the connection
        super().__init__(channel.sock, box_pid, host_pid, pidfd=-1, channel=channel)

    def wait(self, timeout: float | None) -> bool:
        if self.code is None and self._sock.fileno() == -1:
            return False  # released: no exit status will come
        return super().wait(timeout)

    def _finish(self, code: int) -> None:
        with self._send_lock:
            super()._finish(code)

    def signal(self, signum: int) -> None:
        """Ask the daemon to signal the command's whole tree (nothing once it has exited)."""
        with self._send_lock:
            if self.code is None:
                with contextlib.suppress(OSError):
                    self._channel.send({"op": "signal", "sig": int(signum)})

    def release(self) -> None:
        """Close the connection without waiting: the command runs on, its exit status unknown here."""
        with self._send_lock:
            self._sock.close()


class BoxCommand(BoxPopen):
    """A command running in a box, started by its daemon: an ``isolation.BoxPopen`` (so a
    ``subprocess.Popen``) whose exit status and signals go through the daemon (see the module)."""

    def __init__(
        self, args: Any, *, control: Path, box: str = "", tty: bool = False, root: bool = False, **kwargs: Any
    ):
        self._control = control
        self._box = box or control.parent.name
        self._root = root  # as the box's root, not its agent
        self.ident: int | None = None  # the daemon's id of the command (BoxManager.signal)
        self.pty: int | None = None  # the terminal's master, with tty=True
        if tty:
            kwargs.update(stdin=None, stdout=None, stderr=None)
        super().__init__(args, launch=self._spawn, tty=tty, **kwargs)

    def _spawn(self, argv: list[str], env: dict[str, str], cwd: str, fds: list[int], tty: bool) -> ExitSlot:
        """Ask the daemon to start ``argv`` with ``fds`` as its stdin, stdout and stderr (with ``tty``, on a
        terminal of the box's own, whose master comes back)."""
        conn = connect(self._control, self._box)
        try:
            channel = Channel(conn)
            conn.settimeout(REPLY_TIMEOUT_S)
            passed = [] if tty else fds
            message = {"op": "spawn", "argv": argv, "env": env, "cwd": cwd, "tty": tty, "nfds": len(passed)}
            if self._root:
                message["root"] = True
            try:
                channel.send(message, passed)
                answer = channel.receive()
                if answer is not None and answer.get("op") == "waiting":  # the box is frozen for a save
                    conn.settimeout(None)
                    answer = channel.receive()
            except OSError as exc:
                raise ControlError(f"box {self._box}: the command was not started", str(exc), "") from exc
            if answer is None or answer.get("op") != "spawned":
                why = str(answer.get("message")) if answer else "the daemon closed the connection (box stopping?)"
                raise ControlError(f"box {self._box}: the command was not started", why, "")
            if tty:
                (self.pty,) = channel.take_fds(1)
            conn.settimeout(None)
        except BaseException:
            conn.close()
            raise
        self.ident = int(answer["id"])
        return _CommandLink(channel, int(answer["box_pid"]), int(answer["pid"]))

    def close(self) -> None:
        """Let go of the command (it goes on running if it has not exited) and of its terminal."""
        if isinstance(self._slot, _CommandLink) and self.returncode is None:
            self._slot.release()
        if self.pty is not None:
            with contextlib.suppress(OSError):
                os.close(self.pty)
            self.pty = None

    def __del__(self) -> None:
        pty = getattr(self, "pty", None)
        if pty is not None:
            with contextlib.suppress(OSError):
                os.close(pty)
        if getattr(self, "returncode", 0) is None:
            self.returncode = -signal.SIGKILL  # no exit status will come: keep Popen's finaliser quiet
        with contextlib.suppress(Exception):
            super().__del__()


def interact(command: BoxCommand, stdin: int = 0, stdout: int = 1) -> int:
    """Relay the caller's terminal to a tty command until it ends; returns its exit code.

    The caller's terminal is in raw mode meanwhile (restored after), and its
    window size follows the caller's (SIGWINCH) when run on the main thread.
    """
    import termios
    import tty as ttymod

    master = command.pty
    if master is None:
        raise ValueError("interact() needs a command started with tty=True")
    is_tty = os.isatty(stdin)
    saved = termios.tcgetattr(stdin) if is_tty else None

    def resize(*_: Any) -> None:
        import fcntl

        with contextlib.suppress(OSError):
            size = fcntl.ioctl(stdin, termios.TIOCGWINSZ, b"\0" * 8)
            fcntl.ioctl(master, termios.TIOCSWINSZ, size)

    previous = None
    if is_tty:
        resize()
        with contextlib.suppress(ValueError):  # not the main thread: no resizing
            previous = signal.signal(signal.SIGWINCH, resize)
        ttymod.setraw(stdin, termios.TCSANOW)  # keep what was typed ahead
    try:
        inputs = [master, stdin]
        while True:
            try:
                ready, _, _ = select.select(inputs, [], [])
            except InterruptedError:
                continue
            if master in ready:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    data = b""  # EIO: every process on the terminal has gone
                if not data:
                    break
                _write_all(stdout, data)
            if stdin in ready:
                data = os.read(stdin, 65536)
                if not data:
                    inputs.remove(stdin)
                    continue
                _write_all(master, data)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        if previous is not None:
            signal.signal(signal.SIGWINCH, previous)
    return command.wait()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
