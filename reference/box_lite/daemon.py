"""The daemon that holds one running box: ``python -m reference.box_lite.daemon ... NAME``.

A box's init lives only as long as its control socket to the host stays open,
so a running box needs a process that holds that socket: this daemon, one per
running box, started detached by the box manager (``BoxManager.start``).  It
starts the box with the isolation engine, publishes ``daemon.pid`` (holding an
exclusive flock on it for its whole life: a held flock means a live daemon,
whatever pid numbers the kernel recycles) and ``init.pid`` (the box init's
host pid and PID namespace), listens on ``control.sock`` (mode 0600) and
serves framed JSON with descriptors (``isolation.box_init.Channel``):

- ``spawn`` {argv, env, cwd, tty, root} (as the box's agent when it has one, as its root with ``root``)
  with the client's fds 0-2 (or, with tty, a
  terminal of the box's own whose master goes back to the client): answers
  ``spawned`` {id, pid, box_pid}; the connection then belongs to the command:
  the daemon sends ``exit`` {code} when it ends, and reads ``signal`` {sig}
  requests on it, which reach the command's whole tree (its session, and any
  descendant that left it);
- ``signal`` {id, sig}: the same for a command spawned on another connection;
- ``freeze`` / ``thaw``: stop and continue every process of the box (save).
  The freeze is held by the connection that asked for it: when that
  connection closes before its ``thaw`` (the saver died), the box is thawed
  at once.  While the box is frozen, a ``spawn`` is answered ``waiting`` and
  started after the thaw, so no new process writes into /data mid-archive;
- ``processes``: the box's processes; ``ping``: the daemon's pid and box,
  whether it is frozen, and the resource limits it enforces (``limits``);
- ``stop``: ends every box process, records the clean stop in box.json,
  answers ``stopped`` and exits.  SIGTERM, SIGINT and SIGHUP do the same;
- ``connect`` {port, timeout}: a TCP connection to that port of the box's
  loopback (made in the box's network namespace), its descriptor sent back
  (the doctor's in-box MCP handshake);
- ``workload`` {action}: the supervised workload's status, ``up``, ``down``,
  ``logs`` or ``release`` (``workload.Supervisor``); ``freeze`` with
  ``workload: true`` ends the workload first and starts it again at the thaw
  (or when that connection closes).

With ``WORKLOAD`` in the box's settings the daemon supervises it
(``workload``) and, with ``EXPOSE_EXECUTOR_WEB`` and a recorded host port,
relays the host loopback port to it (``relay``).  It also listens on
``managed/inside/hb.sock`` (``/run/hermes-box/hb.sock`` in the box) for
``hb``: one JSON request a line (``workload`` {action}, ``mcp``: the in-box
MCP URL and the token), one answer.

If the box's init ends by itself the daemon exits without recording a clean
stop (the box is then "broken").  If the daemon dies, the engine ends the box:
its init sees the control socket close and exits, and the kernel ends every
process of its PID namespace.

Arguments: ``--box-dir D`` (the box's persistent directory: data/, tmp/,
managed/, box.json) and ``--run-dir R`` (its runtime files), or ``--home H``
for both under a relocated home (the box manager passes the two directories,
which also serves XDG homes), ``--ready-fd N``
(optional: a pipe the daemon writes ``ok`` or the reason it failed to, then
closes) and the box name.  It imports little (the engine, the standard
library and the box manager's stdlib-only paths, records, control, settings,
limits, endpoint, relay and workload modules), so a box starts in a fraction of a second.  The box manager runs
it without site processing (``python -I -S``, the project's directories
appended to sys.path, then ``run()``): nothing it imports may come from
outside the standard library and this project.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from isolation import Bind, BoxFile, BoxSpec, BoxUser, IsolationError, NamespaceBox, NamespaceDriver, RootLayers
from isolation.box_init import Channel
from isolation.rootfs import ToolsLayer, directory_base, host_base
from reference.box_lite import endpoint, limits, relay, workload
from reference.box_lite.control import socket_address
from reference.box_lite.errors import BoxError
from reference.box_lite.paths import (
    AGENT_ID,
    DATA_INSIDE,
    ENV_FILE_INSIDE,
    HB_SOCKET,
    HOME_INSIDE,
    RUN_INSIDE,
    BoxDir,
    BoxHome,
    RunDir,
)
from reference.box_lite.records import mark_stopped, publish_atomic, read_object, utc_now
from reference.box_lite.settings import Settings

STOP_TIMEOUT_S = 10.0
SIGNAL_GRACE_S = 2.0  # how long a stop by signal lets the box's processes end after SIGTERM
CLAIM_ATTEMPTS = 50
SIGNAL_ROUNDS = 5  # freeze passes that catch a tree's processes forked while it is being signalled
HB_BIN_DIR = "/usr/local/bin"  # where `hb` is on the box's PATH
HB_REQUEST_LIMIT = 4096
HB_TIMEOUT_S = 10.0


class DaemonError(Exception):
    """The box could not be started (said on the ready pipe and in daemon.log)."""


def log(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"{utc_now()} [{os.getpid()}] {message}\n")
        sys.stderr.flush()


def _box_settings(box: BoxDir) -> Settings:
    """box.env as provisioned into the box (managed/hermes-box.env); the defaults when it is unusable."""
    try:
        return Settings.load(box.env_file)
    except BoxError as exc:
        log(f"{box.env_file}: {exc}; using the default settings")
        return Settings()


def _limit_values(settings: Settings, record: dict[str, Any]) -> dict[str, Any]:
    """The box's limits: box.env's (as provisioned into managed/hermes-box.env), then its own from
    box.json (``hermes-box new --pids-max ...``) over them."""
    values: dict[str, Any] = {
        "pids_max": settings.pids_max,
        "memory_max": settings.memory_max,
        "cpu_max": settings.cpu_max,
    }
    own = record.get("limits")
    if isinstance(own, dict):
        values.update({k: v for k, v in own.items() if k in values})
    return values


def read_box_json(box: BoxDir) -> dict[str, Any]:
    info = read_object(box.record)
    if info is None:
        raise DaemonError(f"cannot read {box.record} (missing, unreadable or not a JSON object)")
    return info


def box_spec(name: str, box: BoxDir, network: bool, rootfs: RootLayers | None = None) -> BoxSpec:
    files: tuple[BoxFile, ...] = (BoxFile(box.env_file, ENV_FILE_INSIDE),) if box.env_file.is_file() else ()
    inside = (Bind(box.inside, RUN_INSIDE, writable=False),) if box.inside.is_dir() else ()
    if inside and (box.inside / "hb").is_file() and os.path.isdir(HB_BIN_DIR) and not os.path.islink(HB_BIN_DIR):
        files += (BoxFile(box.inside / "hb", f"{HB_BIN_DIR}/hb"),)
    return BoxSpec(
        hostname=name,
        binds=(
            Bind(box.data, DATA_INSIDE),
            Bind(box.home, HOME_INSIDE),
            Bind(box.tmp, "/tmp"),
            Bind(box.tmp, "/var/tmp"),
            *inside,
        ),
        files=files,
        network=network,
        rootfs=rootfs,
    )


def machine_root(box: BoxDir, record: dict[str, Any], uid_base: int) -> RootLayers | None:
    """The box's root of layers (its tools layer over its base, masks refreshed), None for a box that
    has no machine (box.json without ``machine``)."""
    machine = record.get("machine")
    if not isinstance(machine, dict):
        return None
    base_name = str(machine.get("base") or "host")
    base = host_base() if base_name == "host" else directory_base(Path(str(machine.get("base_dir") or base_name)))
    tools = ToolsLayer(box.tools)
    if not tools.exists():
        raise DaemonError(
            f"box {box.root.name} has no tools layer ({box.tools}): run hermes-box repair {box.root.name}"
        )
    tools.refresh_masks(base, uid_base)
    return tools.layers(base)


def empty_dir(path: Path) -> None:
    """Remove everything in ``path`` (the box's /tmp at each start), keeping the directory."""
    import shutil

    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


# -- /proc helpers ---------------------------------------------------------------------------------
def _stat_fields(pid: int) -> list[bytes] | None:
    """Fields of /proc/PID/stat after the command name: [state, ppid, pgrp, session, ...]."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _describe_process(pid: int) -> dict[str, Any] | None:
    fields = _stat_fields(pid)
    if fields is None:
        return None
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
        with open(f"/proc/{pid}/status") as fh:
            nspid = next((ln.split()[-1] for ln in fh if ln.startswith("NSpid:")), "")
    except OSError:
        return None
    return {"pid": pid, "box_pid": int(nspid) if nspid else None, "state": fields[0].decode(), "argv": argv}


# -- commands --------------------------------------------------------------------------------------
class Command:
    """A command the daemon started: its Popen handle and the connection it reports to."""

    def __init__(self, ident: int, popen: Any, conn: socket.socket):
        self.ident = ident
        self.popen = popen
        self.pid: int = popen.pid
        self.conn = conn
        self.send_lock = threading.Lock()
        self.code: int | None = None
        self._holders = 2  # the connection's reader and the command's reaper: the last one closes it

    def send(self, message: dict[str, Any], fds: list[int] | tuple[int, ...] = ()) -> None:
        with self.send_lock, contextlib.suppress(OSError):
            Channel(self.conn).send(message, fds)

    def release(self) -> None:
        with self.send_lock:
            self._holders -= 1
            last = self._holders == 0
        if last:
            self.conn.close()


class Daemon:
    def __init__(self, name: str, box: BoxDir, run: RunDir):
        self.name = name
        self.box_dir = box
        self.run_dir = run
        # The box's setup is forked from this daemon (no second interpreter to start): a daemon holds
        # nothing of the user's (its environment is _daemon_env's, its memory the box's own records).
        self.driver = NamespaceDriver(spares=0, probe=False, fork_self=True)
        self.box: NamespaceBox | None = None
        self.commands: dict[int, Command] = {}
        self.lock = threading.Lock()
        self.freezes = 0  # connections holding the box frozen (one at a time: a save holds the box's lock)
        self.thawed = threading.Condition(self.lock)
        self.next_id = 1
        self.stopping = threading.Event()
        self.stop_waiters: list[socket.socket] = []
        self.grace = SIGNAL_GRACE_S
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.pid_fd = -1
        self.listener: socket.socket | None = None
        self.enforcement = limits.Enforcement()
        self.settings = Settings()
        self.supervisor: workload.Supervisor | None = None
        self.relay: relay.Relay | None = None
        self.hb_listener: socket.socket | None = None
        self.user: BoxUser | None = None  # whom commands run as unless they ask for root (the box's agent)

    # -- start ------------------------------------------------------------------------------------
    def claim(self) -> None:
        """Hold daemon.pid's flock (one daemon per box) and publish this pid in it."""
        self.run_dir.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.run_dir.daemon_pid, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        for attempt in range(CLAIM_ATTEMPTS):  # a state probe holds a shared lock for a moment
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) or attempt == CLAIM_ATTEMPTS - 1:
                    os.close(fd)
                    if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise DaemonError(f"box {self.name} already has a running daemon") from exc
                    raise
                time.sleep(0.01)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.pid_fd = fd

    def start_box(self) -> None:
        box_dir = self.box_dir
        info = read_box_json(box_dir)
        if info.get("name") not in (None, self.name):
            raise DaemonError(f"{box_dir.record} is box {info.get('name')!r}, not {self.name!r}")
        network = bool(info.get("network", True))
        for path in (box_dir.data, box_dir.home, box_dir.tmp):
            path.mkdir(mode=0o755, parents=True, exist_ok=True)
        empty_dir(box_dir.tmp)
        uid, gid = self.driver.box_uid, self.driver.box_gid
        rootfs = machine_root(box_dir, info, uid) if self.driver.root_layers else None
        if rootfs is not None:  # /data and the home are the agent's; commands run as the agent
            self.user = BoxUser(AGENT_ID, AGENT_ID, (AGENT_ID,))
            uid, gid = uid + AGENT_ID, gid + AGENT_ID
        if os.geteuid() == 0:
            for path in (box_dir.data, box_dir.home, box_dir.tmp):
                os.chown(path, uid, gid)
        os.chmod(box_dir.tmp, 0o1777)
        try:
            self.box = self.driver.start(box_spec(self.name, box_dir, network, rootfs))
        except IsolationError as exc:
            raise DaemonError(str(exc)) from exc
        self.settings = _box_settings(box_dir)
        self.enforcement = limits.apply(self.name, self.box.init_pid, limits.wanted(_limit_values(self.settings, info)))
        for shown, why in self.enforcement.refused.items():
            log(f"box {self.name}: {shown} is not enforced: {why}")
        pidns = self.box.pidns[1] if self.box.pidns else 0
        publish_atomic(self.run_dir.init_pid, f"{self.box.init_pid} {pidns}\n".encode())
        if not mark_stopped(box_dir.record, clean=False):
            raise DaemonError(f"cannot record the start in {box_dir.record}")
        log(f"box {self.name} started: init {self.box.init_pid}, {self.driver.available()[1]}")

    def listen(self) -> None:
        path = self.run_dir.control_socket
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead daemon's (this one holds daemon.pid's flock: no other runs)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            with socket_address(path) as address:
                listener.bind(address)
        finally:
            os.umask(old)
        os.chmod(path, 0o600)
        listener.listen(64)
        self.listener = listener

    # -- the workload, its forwarded endpoint and `hb`'s socket ---------------------------------------
    def start_services(self) -> None:
        """``hb``'s socket always; with ``WORKLOAD``, its supervisor, and with ``EXPOSE_EXECUTOR_WEB``
        and a recorded host port, the forwarded endpoint (see ``workload`` and ``relay``)."""
        self.listen_hb()
        if not self.settings.workload:
            return
        token = endpoint.read_token(self.box_dir) or ""
        env = read_object(self.box_dir.command_env) or {"HOME": HOME_INSIDE, "PATH": "/usr/bin:/bin"}
        env = {str(k): str(v) for k, v in env.items()}
        if token:
            env["HERMES_BOX_TOKEN"] = token
        self.supervisor = workload.Supervisor(
            self.box_dir,
            self.settings.workload,
            self.settings.workload_port,
            env,
            self.spawn_service,
            self.signal_leader,
        )
        self.supervisor.start()
        port = endpoint.host_port(read_object(self.box_dir.record))
        if self.settings.expose_executor_web and port is not None and token:
            wanted = self.settings.workload_port
            self.relay = relay.Relay(
                port, token, lambda timeout: self.connect_inside(wanted, timeout), self.workload_why, log
            )
            if not self.relay.start():
                log(f"box {self.name}: forwarded endpoint: {self.relay.error}")

    def workload_why(self) -> str:
        return str(self.supervisor.status().get("state")) if self.supervisor is not None else ""

    def spawn_service(self, argv: list[str], env: dict[str, str], cwd: str, out: int) -> Any:
        """Start a service of the box (the workload) as the box's user (its agent in a box with a machine),
        after a thaw if the box is frozen for a save."""
        assert self.box is not None
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        try:
            with self.lock:
                while self.freezes and not self.stopping.is_set():
                    self.thawed.wait(0.5)
                if self.stopping.is_set():
                    raise OSError(errno.ESHUTDOWN, "the box is stopping")
                return self.driver.spawn(
                    self.box, argv, env=env, cwd=cwd, stdin=null, stdout=out, stderr=out, user=self.user
                )
        finally:
            os.close(null)

    def connect_inside(self, port: int, timeout: float) -> socket.socket:
        """A TCP connection to ``127.0.0.1:port`` in the box's network namespace."""
        if self.box is None or not self.box.alive:
            raise OSError(errno.ENOTCONN, "the box is not running")
        try:
            sock = self.driver.tcp_socket(self.box)
        except IsolationError as exc:
            raise OSError(errno.EIO, str(exc)) from exc
        try:
            sock.settimeout(timeout)
            sock.connect(("127.0.0.1", port))
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        return sock

    def workload_request(self, message: dict[str, Any]) -> dict[str, Any]:
        """``workload`` {action}: status, up, down (``hb``), release (``load``, once the restore is verified)."""
        action = message.get("action")
        supervisor = self.supervisor
        if supervisor is None:
            return {"op": "workload", "workload": None, "why": "no WORKLOAD in the box's box.env"}
        if action == "up":
            supervisor.resume()
        elif action == "down":
            supervisor.pause()
        elif action == "release":
            with contextlib.suppress(FileNotFoundError):
                workload.held_marker(self.box_dir).unlink()
            supervisor.release()
        elif action == "logs":
            lines = max(1, min(int(message.get("lines") or 100), 5000))
            return {"op": "workload", "log": workload.tail(workload.log_path(self.box_dir), lines)}
        elif action != "status":
            return {"op": "error", "message": f"unknown workload action {action!r}"}
        return {"op": "workload", "workload": supervisor.status(), "endpoint": self.endpoint_state()}

    def endpoint_state(self) -> dict[str, Any] | None:
        if self.relay is None:
            return None
        return {"host_port": self.relay.port, "listening": not self.relay.error, "error": self.relay.error}

    def listen_hb(self) -> None:
        """``hb``'s socket, ``/run/hermes-box/hb.sock`` in the box: one JSON request a line, one answer."""
        folder = self.box_dir.inside
        if not folder.is_dir():
            return
        path = folder / HB_SOCKET
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            with socket_address(path) as address:
                listener.bind(address)
            os.chmod(path, 0o666)  # whichever account of the box runs hb (the directory is the box's only)
            listener.listen(16)
        except OSError as exc:
            listener.close()
            log(f"box {self.name}: no hb socket: {exc}")
            return
        self.hb_listener = listener
        threading.Thread(target=self.serve_hb, args=(listener,), name="hb", daemon=True).start()

    def serve_hb(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self.hb_connection, args=(conn,), daemon=True).start()

    def hb_connection(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(HB_TIMEOUT_S)
                data = b""
                while b"\n" not in data and len(data) < HB_REQUEST_LIMIT:
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    data += chunk
                message = json.loads(data.split(b"\n")[0] or b"{}")
                if not isinstance(message, dict):
                    raise ValueError("not an object")
                conn.settimeout(None)  # `hb down` waits for the workload to end
                answer = self.hb_answer(message)
                conn.sendall(json.dumps(answer).encode() + b"\n")
            except (OSError, ValueError) as exc:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"op": "error", "message": str(exc)}).encode() + b"\n")

    def hb_answer(self, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        if op == "mcp":  # what `hb wire-mcp` and `hb doctor` need: the in-box URL and the token
            path = self.settings.workload_mcp_path
            if not self.settings.workload or path is None:
                return {"op": "error", "message": "the box has no MCP workload (WORKLOAD, WORKLOAD_MCP_PATH)"}
            return {
                "op": "mcp",
                "name": "executor" if self.settings.workload.strip() == "executor" else "box-workload",
                "url": f"http://127.0.0.1:{self.settings.workload_port}{path}",
                "token": endpoint.read_token(self.box_dir) or "",
            }
        if op == "workload":
            return self.workload_request(message)
        return {"op": "error", "message": f"unknown request {op!r}"}

    # -- serving ------------------------------------------------------------------------------------
    def serve(self) -> None:
        assert self.box is not None and self.listener is not None
        init_fd = os.pidfd_open(self.box.init_pid)
        listen_fd = self.listener.fileno()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, lambda *_: None)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        try:
            while not self.stopping.is_set():
                try:
                    ready, _, _ = select.select([listen_fd, init_fd, self.wake_r], [], [])
                except InterruptedError:
                    continue
                if self.wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        signals = os.read(self.wake_r, 64)
                        if any(s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP) for s in signals):
                            log(f"signal {list(signals)}: stopping")
                            self.stopping.set()
                if init_fd in ready:
                    log(f"box {self.name}: its init ended by itself; the box is down")
                    self.finish(clean=False)
                    return
                if listen_fd in ready and not self.stopping.is_set():
                    with contextlib.suppress(OSError):
                        conn, _ = self.listener.accept()
                        threading.Thread(target=self.connection, args=(conn,), daemon=True).start()
            self.finish(clean=True)
        finally:
            os.close(init_fd)

    def connection(self, conn: socket.socket) -> None:
        channel = Channel(conn)
        command: Command | None = None
        holds_freeze = False
        holds_workload = False
        try:
            while True:
                message = channel.receive()
                if message is None:
                    return
                fds = channel.take_fds(int(message.get("nfds") or 0))
                op = message.get("op")
                if op == "spawn" and command is None:
                    command = self.spawn(conn, message, fds)
                elif op == "signal":
                    target = command if command is not None and "id" not in message else self.find(message.get("id"))
                    count = self.signal_tree(target, int(message["sig"])) if target is not None else 0
                    if command is None:  # on a command's own connection a signal gets no answer
                        channel.send({"op": "signalled", "count": count, "known": target is not None})
                elif command is not None:
                    command.send({"op": "error", "message": f"{op!r} on a command's connection"})
                elif op == "connect":  # a socket to a port of the box's loopback, for the doctor
                    for fd in fds:
                        os.close(fd)
                    try:
                        sock = self.connect_inside(int(message["port"]), float(message.get("timeout") or 5.0))
                    except (OSError, KeyError, ValueError) as exc:
                        channel.send({"op": "error", "message": f"cannot connect: {exc}"})
                    else:
                        with sock:
                            channel.send({"op": "connected", "nfds": 1}, [sock.fileno()])
                else:
                    for fd in fds:
                        os.close(fd)
                    if op == "stop":
                        with self.lock:
                            self.stop_waiters.append(conn)
                            self.grace = min(float(message.get("grace") or 0.0), 120.0)
                        self.stopping.set()
                        os.write(self.wake_w, b"\0")
                        conn = None  # type: ignore[assignment]  # answered by finish()
                        return
                    if op in ("freeze", "thaw") and holds_freeze == (op == "freeze"):
                        answer = {"op": "error", "message": f"{op!r} twice on one connection"}
                    else:
                        if op == "freeze" and message.get("workload") and self.supervisor is not None:
                            self.supervisor.hold()  # quiesced first: it ends cleanly, then the box is frozen
                            holds_workload = True
                        answer = self.answer(message)
                        if op in ("freeze", "thaw") and answer.get("op") == "done":
                            holds_freeze = op == "freeze"
                        if op == "thaw" and holds_workload and self.supervisor is not None:
                            self.supervisor.release()
                            holds_workload = False
                    channel.send(answer)
        except (OSError, ValueError) as exc:
            log(f"a control connection failed: {exc}")
        finally:
            if holds_freeze:
                log(f"box {self.name}: the connection holding its freeze closed before the thaw; thawing")
                self.answer({"op": "thaw"})
            if holds_workload and self.supervisor is not None:
                self.supervisor.release()
            if command is not None:
                command.release()
            elif conn is not None:
                conn.close()

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        try:
            assert self.box is not None
            if op == "ping":
                return {
                    "op": "pong",
                    "pid": os.getpid(),
                    "name": self.name,
                    "init_pid": self.box.init_pid,
                    "frozen": self.freezes > 0,
                    "limits": self.enforcement.as_json(),
                    "workload": self.supervisor.status() if self.supervisor is not None else None,
                    "endpoint": self.endpoint_state(),
                }
            if op == "workload":
                return self.workload_request(message)
            if op == "freeze":
                with self.lock:  # a spawn holds it too: a command starts before the freeze, or after the thaw
                    self.driver.freeze(self.box)
                    self.freezes += 1
                return {"op": "done"}
            if op == "thaw":
                with self.lock:
                    self.freezes = max(0, self.freezes - 1)
                    if not self.freezes:
                        self.driver.thaw(self.box)
                        self.thawed.notify_all()
                return {"op": "done"}
            if op == "processes":
                found = [_describe_process(pid) for pid in sorted(self.driver.processes(self.box))]
                return {"op": "processes", "processes": [p for p in found if p is not None]}
        except (IsolationError, OSError) as exc:
            return {"op": "error", "message": str(exc)}
        return {"op": "error", "message": f"unknown request {op!r}"}

    def spawn(self, conn: socket.socket, message: dict[str, Any], fds: list[int]) -> Command | None:
        assert self.box is not None
        pty: tuple[int, int] | None = None
        try:
            if message.get("tty"):
                pty = self.driver.open_pty(self.box)
                streams = [pty[1]] * 3
            else:
                if len(fds) != 3:
                    raise ValueError(f"spawn needs 3 descriptors (stdin, stdout, stderr), got {len(fds)}")
                streams = fds
            with self.lock:  # started before a freeze (which then stops it too) or after the thaw
                if self.freezes:
                    Channel(conn).send({"op": "waiting", "why": "the box is frozen while it is saved"})
                while self.freezes and not self.stopping.is_set():
                    self.thawed.wait(0.5)
                popen = self.driver.spawn(
                    self.box,
                    [str(a) for a in message["argv"]],
                    env={str(k): str(v) for k, v in (message.get("env") or {}).items()},
                    cwd=str(message.get("cwd") or "/"),
                    stdin=streams[0],
                    stdout=streams[1],
                    stderr=streams[2],
                    tty=bool(message.get("tty")),
                    user=None if message.get("root") else self.user,
                )
        except (IsolationError, OSError, ValueError, KeyError, TypeError) as exc:
            with contextlib.suppress(OSError):
                Channel(conn).send({"op": "error", "message": str(exc)})
            if pty is not None:
                os.close(pty[0])
            return None
        finally:
            for fd in fds:
                os.close(fd)
            if pty is not None:
                os.close(pty[1])
        with self.lock:
            ident, self.next_id = self.next_id, self.next_id + 1
            command = Command(ident, popen, conn)
            self.commands[ident] = command
        reply = {"op": "spawned", "id": ident, "pid": popen.pid, "box_pid": popen.box_pid}
        if pty is not None:
            command.send({**reply, "nfds": 1}, [pty[0]])
            os.close(pty[0])
        else:
            command.send(reply)
        threading.Thread(target=self.reap, args=(command,), daemon=True).start()
        return command

    def reap(self, command: Command) -> None:
        command.code = command.popen.wait()
        command.send({"op": "exit", "code": command.code})
        with self.lock:
            self.commands.pop(command.ident, None)
        with contextlib.suppress(OSError):
            command.conn.shutdown(socket.SHUT_WR)  # the client closes; late signal requests are ignored
        command.release()

    def find(self, ident: object) -> Command | None:
        with self.lock:
            return self.commands.get(ident) if isinstance(ident, int) else None

    def tree(self, leader: int) -> set[int]:
        """Host pids of the command's tree: its session's members and every descendant of them."""
        assert self.box is not None
        parent: dict[int, int] = {}
        found: set[int] = set()
        for pid in self.driver.processes(self.box):
            fields = _stat_fields(pid)
            if fields is None or len(fields) < 4:
                continue
            parent[pid] = int(fields[1])
            if pid == leader or int(fields[3]) == leader:
                found.add(pid)
        grew = True
        while grew:
            grew = False
            for pid, ppid in parent.items():
                if pid not in found and ppid in found:
                    found.add(pid)
                    grew = True
        return found

    def signal_tree(self, command: Command, signum: int) -> int:
        """Send ``signum`` to the command's whole tree (see ``signal_leader``)."""
        return self.signal_leader(command.pid, signum)

    def signal_leader(self, leader: int, signum: int) -> int:
        """Send ``signum`` to the tree of the command whose first process is ``leader``; for SIGKILL the
        tree is frozen first, so that nothing it forks in the meantime escapes.  Returns how many
        processes got it."""
        if self.box is None or not self.box.alive:
            return 0
        if signum != signal.SIGKILL:
            members = self.tree(leader)
            # The command's own process first: were a child to get the signal first, the command
            # could see it end and exit by itself before its own signal arrives.
            for pid in sorted(members, key=lambda pid: pid != leader):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)
            return len(members)
        frozen: set[int] = set()
        for _ in range(SIGNAL_ROUNDS):
            new = self.tree(leader) - frozen
            if not new:
                break
            for pid in new:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
            frozen |= new
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return len(frozen)

    # -- stop ---------------------------------------------------------------------------------------
    def terminate(self, box: NamespaceBox, grace: float) -> None:
        """SIGTERM every process of the box but its init; wait up to ``grace`` s for them to exit."""
        try:
            for signum in (signal.SIGTERM, signal.SIGCONT):  # a frozen box's processes must run to exit
                box.request({"op": "signal_all", "signal": int(signum), "reply": True})
        except (IsolationError, OSError) as exc:
            log(f"box {self.name}: SIGTERM to its processes failed: {exc}")
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and box.alive:
            if not [pid for pid in self.driver.processes(box) if pid != box.init_pid]:
                return
            time.sleep(0.05)

    def stop_services(self) -> None:
        """End the forwarded endpoint, ``hb``'s socket and the workload (its state: stopped)."""
        if self.relay is not None:
            self.relay.close()
        if self.hb_listener is not None:
            self.hb_listener.close()
            with contextlib.suppress(FileNotFoundError):
                (self.box_dir.inside / HB_SOCKET).unlink()
        if self.supervisor is not None and self.box is not None and self.box.alive:
            self.supervisor.close()

    def finish(self, clean: bool) -> None:
        """End the box (SIGTERM to its processes, ``grace`` seconds for them to exit, then the end of
        its init), record how, answer whoever asked for the stop; the process exits next."""
        if self.listener is not None:
            self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.run_dir.control_socket.unlink()
        self.stop_services()
        left: list[int] = []
        if self.box is not None:
            if clean and self.grace > 0:
                self.terminate(self.box, self.grace)
            left = self.driver.stop(self.box, STOP_TIMEOUT_S)
        if left:
            log(f"box {self.name}: processes {left} outlived its init")
        self.enforcement.release()
        with contextlib.suppress(FileNotFoundError):
            self.run_dir.init_pid.unlink()
        try:
            recorded = mark_stopped(self.box_dir.record, clean=clean and not left)
        except OSError as exc:
            recorded = False
            log(f"box {self.name}: {exc}")
        if not recorded:
            log(f"box {self.name}: could not record the stop in {self.box_dir.record}")
        log(f"box {self.name} stopped ({'cleanly' if clean and not left else 'not cleanly'})")
        with self.lock:
            waiters, self.stop_waiters = self.stop_waiters, []
        for conn in waiters:
            with contextlib.suppress(OSError):
                Channel(conn).send({"op": "stopped", "clean": clean and not left})
            conn.close()


def _arguments(argv: list[str]) -> tuple[str, BoxDir, RunDir, int]:
    options: dict[str, str] = {}
    rest: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg in ("--box-dir", "--run-dir", "--ready-fd", "--home"):
            options[arg] = next(it, "")
        else:
            rest.append(arg)
    if len(rest) == 1 and options.get("--home") and not (options.get("--box-dir") or options.get("--run-dir")):
        home = BoxHome.at(options["--home"])
        options.update({"--box-dir": str(home.box(rest[0]).root), "--run-dir": str(home.run(rest[0]).root)})
    if len(rest) != 1 or not options.get("--box-dir") or not options.get("--run-dir"):
        raise SystemExit(
            "usage: python -m reference.box_lite.daemon (--home H | --box-dir D --run-dir R) [--ready-fd N] NAME"
        )
    ready = int(options.get("--ready-fd") or -1)
    return rest[0], BoxDir(Path(options["--box-dir"])), RunDir(Path(options["--run-dir"])), ready


def _tell(ready: int, text: str) -> None:
    if ready == -1:
        return
    with contextlib.suppress(OSError):
        os.write(ready, text.encode(errors="replace")[:4000])
        os.close(ready)


def _interrupted(signum: int, _frame: object) -> None:
    raise DaemonError(f"interrupted by signal {signum} while starting")


def main(argv: list[str]) -> int:
    name, box, run, ready = _arguments(argv)
    if ready != -1:
        os.set_inheritable(ready, False)
    # Detach: the launcher reaps this process at once; the daemon goes on in a child it never waits for.
    if os.fork() != 0:
        os._exit(0)
    os.chdir("/")
    for signum in (signal.SIGTERM, signal.SIGHUP):  # until the box serves: give up cleanly, as for Ctrl-C
        signal.signal(signum, _interrupted)
    daemon = Daemon(name, box, run)
    try:
        daemon.claim()
        daemon.start_box()
        daemon.listen()
        daemon.start_services()
    except BaseException as exc:
        why = str(exc) if isinstance(exc, (DaemonError, OSError)) else f"{type(exc).__name__}: {exc}"
        log(f"box {name} did not start: {why}")
        if daemon.box is not None:
            daemon.driver.stop(daemon.box, STOP_TIMEOUT_S)
            with contextlib.suppress(FileNotFoundError):
                run.init_pid.unlink()
        _tell(ready, why)
        return 1
    _tell(ready, "ok")
    daemon.serve()
    return 0


def run() -> None:
    """The daemon process: ``main`` with its command line, then exit at once (no interpreter teardown
    waiting for the threads of connections still open)."""
    code = main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
