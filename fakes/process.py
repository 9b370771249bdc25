"""Each fake vendor service in its own process, steered through a control channel.

    python -m fakes.process VENDOR --root DIR [--profile suite|vendor] [--max-sandboxes N]
                            [--host H] [--port N] [--api-key KEY] [--watch-stdin] [--remove-root]

The fake's process starts the service with the factories of fakes/services.py
and serves its world adapter through fakes/control.py; then it prints one
JSON line (the control address) and serves until SIGTERM/SIGINT, or, with
``--watch-stdin``, until its stdin reaches end of file: the kit holds the
other end of that pipe, so when the kit's process ends for any reason
(SIGKILL included) the fake stops too, ends its streams, kills its box
processes and removes its world (with ``--remove-root``, its whole root,
log included, once it stopped cleanly).

Kit side: ``spawn`` starts one and returns a ``FakeService`` whose ``world``
is a proxy with the adapter's interface (``kit.world.pause(id)``,
``kit.world.faults.arm(...)`` work unchanged); ``attach`` does the same for
a fake started by hand with ``hermes-backend-kit fake serve``.  Nothing a
backend does in the kit's interpreter (finalizers, blocking calls, signal
handlers, monkeypatching) can stall or alter a fake that serves from here.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fakes import services
from fakes.control import ControlClient, ControlError, ControlServer
from fakes.services import FakeError, FakeOptions, FakeService
from fakes.world import NAMESPACES_ENV

logger = logging.getLogger("fakes.process")

READY_TIMEOUT_S = 60.0  # a loaded 2-core machine imports uvicorn and starlette slowly
STOP_GRACE_S = 20.0  # stopping ends streams and kills box processes; a stuck fake is killed after this
STOP_DEADLINE_S = 15.0  # inside the fake's process: exit even if its stop hangs
CONTROL_VAR = "HERMES_KIT_FAKE_CONTROL"
# The fake's process gets this machine's basics and the box world's switch, never the kit's credentials.
_PASS_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "PYTHONPATH",
    "PYTHONHASHSEED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPYCACHEPREFIX",
    "PYTHONUTF8",
    "VIRTUAL_ENV",
    NAMESPACES_ENV,
)
_PASS_PREFIXES = ("LC_", "COVERAGE_")


# ------------------------------------------------------------------ in the fake's process
def serve(
    name: str,
    root: Path,
    options: FakeOptions,
    *,
    on_ready: Callable[[FakeService, str], None],
    watch_stdin: bool = False,
) -> int:
    """Start fake ``name`` under ``root`` with its control channel; serve until told to stop.

    Call from the main thread: SIGINT and SIGTERM stop it.  ``on_ready``
    gets the running fake and the control address.
    """
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    if watch_stdin:
        threading.Thread(target=_watch_stdin, args=(stop,), name="parent-watch", daemon=True).start()
    fake = services.start(name, root, options)
    control = None
    try:
        info = {
            "name": fake.name,
            "env": fake.env,
            "secret_vars": sorted(fake.secret_vars),
            "credential_var": fake.credential_var,
            "paths_note": fake.paths_note,
            "profile": options.profile,
            "max_sandboxes": options.max_sandboxes,
        }
        control = ControlServer(fake.world, info=info).start()
        on_ready(fake, control.address)
        while not stop.wait(1.0):
            pass
    finally:
        # Never outlive a stop that hangs: the kit is waiting for this process to end.
        deadline = threading.Timer(STOP_DEADLINE_S, os._exit, (3,))
        deadline.daemon = True
        deadline.start()
        closing = threading.Thread(target=control.stop, name="control-stop") if control is not None else None
        if closing is not None:
            closing.start()
        fake.stop()
        if closing is not None:
            closing.join(STOP_DEADLINE_S)
        deadline.cancel()
    return 0


def _watch_stdin(stop: threading.Event) -> None:
    """End of file on stdin: the kit closed its end or its process is gone."""
    with contextlib.suppress(OSError):
        while os.read(0, 4096):
            pass
    stop.set()


def _announce(fake: FakeService, address: str) -> None:
    sys.stdout.write(json.dumps({"control": address, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    os.dup2(2, 1)  # anything printed later goes to the log, not into the kit's pipe


def parser(prog: str = "python -m fakes.process") -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(prog=prog, description="Serve one fake vendor service and its control channel.")
    found.add_argument("name", choices=services.SERVERS)
    found.add_argument("--root", type=Path, required=True, help="where the fake keeps its sandboxes")
    add_limit_options(found, default_profile="suite")
    found.add_argument("--watch-stdin", action="store_true", help="stop when stdin reaches end of file")
    found.add_argument("--remove-root", action="store_true", help="remove --root after a clean stop")
    return found


def add_limit_options(target: argparse.ArgumentParser, *, default_profile: str) -> None:
    """The options `fake serve` and ``python -m fakes.process`` share."""
    target.add_argument("--port", type=int, default=0, help="TCP port (default: an ephemeral port)")
    target.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    target.add_argument("--api-key", default=None, help="the key to accept (default: a random one, printed)")
    target.add_argument(
        "--profile",
        choices=services.PROFILES,
        default=default_profile,
        help="vendor: the real service's limits and timings; suite: what the kit's own runs use "
        f"(sandbox caps of {services.SUITE_MAX_SANDBOXES}, instant state changes, short "
        f"intervals, every protocol extension) (default: {default_profile})",
    )
    target.add_argument(
        "--max-sandboxes",
        type=int,
        default=None,
        metavar="N",
        help="sandboxes one key may hold at once (upstash: the box quota, 10 on the vendor "
        "profile; deepinfra: active sandboxes, 5 on the vendor profile); a conformance run "
        "needs more than those (1000 is plenty)",
    )
    target.add_argument(
        "--rtt",
        type=float,
        default=0.0,
        metavar="MS",
        help="round-trip time between the fake and its clients in milliseconds: half of it each way on every "
        "byte, and two more round trips for each new connection (TCP and TLS handshakes) (default: 0, loopback)",
    )
    target.add_argument(
        "--jitter",
        type=float,
        default=0.0,
        metavar="MS",
        help="up to this many milliseconds more on each crossing, at random, order kept (default: 0)",
    )


def options_from(args: argparse.Namespace) -> FakeOptions:
    return FakeOptions(
        profile=args.profile,
        max_sandboxes=args.max_sandboxes,
        host=args.host,
        port=args.port,
        api_key=args.api_key,
        rtt_ms=args.rtt,
        jitter_ms=args.jitter,
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code = serve(args.name, args.root, options_from(args), on_ready=_announce, watch_stdin=args.watch_stdin)
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: the {args.name} fake did not start: {exc}", file=sys.stderr)
        return 2
    if code == 0 and args.remove_root:
        shutil.rmtree(args.root, ignore_errors=True)
    if args.watch_stdin:
        # Everything is stopped and removed: skip the interpreter's teardown, the kit is waiting.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


# ------------------------------------------------------------------ in the kit's process
def child_env() -> dict[str, str]:
    """The fake process's environment: this machine's basics and the path to this package, no credential."""
    env = {k: v for k, v in os.environ.items() if k in _PASS_ENV or k.startswith(_PASS_PREFIXES)}
    package_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    return env


class _Child:
    """A fake's process as the kit sees it: started, ready, stopped without leftovers."""

    def __init__(self, name: str, workdir: Path, options: FakeOptions):
        self.name = name
        self.workdir = workdir
        self.log_path = workdir / "fake.log"
        workdir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "fakes.process",
            name,
            "--root",
            str(workdir),
            "--watch-stdin",
            "--remove-root",
            *options.argv(),
        ]
        with open(self.log_path, "wb") as log:
            # Its own session: a Ctrl-C at the terminal reaches the kit, which then stops the fake in order.
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=child_env(),
                cwd=workdir,
                start_new_session=True,
            )
        self._stopped = False

    def describe(self) -> str:
        code = self.proc.poll()
        state = "still running" if code is None else f"exited with code {code}"
        return f"the {self.name} fake's process (pid {self.proc.pid}) {state}; its log ends: {self.log_tail()!r}"

    def log_tail(self, size: int = 1500) -> str:
        try:
            data = self.log_path.read_bytes()[-size:]
        except OSError:
            return ""
        return data.decode("utf-8", "replace").strip()

    def wait_ready(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        buffer = b""
        while b"\n" not in buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FakeError(
                    f"the {self.name} fake's process did not get ready within {timeout:.0f} s; {self.describe()}"
                )
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(5)
                raise FakeError(f"the {self.name} fake's process ended before it was ready: {self.describe()}")
            buffer += chunk
        self.proc.stdout.close()
        try:
            return str(json.loads(buffer.split(b"\n", 1)[0])["control"])
        except (ValueError, KeyError, TypeError):
            raise FakeError(
                f"the {self.name} fake's process announced {buffer[:200]!r}, not its control address"
            ) from None

    def stop(self) -> None:
        """End the fake (its streams, its box processes, its world) and remove everything it made."""
        if self._stopped:
            return
        self._stopped = True
        proc = self.proc
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # end of file: the fake stops in order
        try:
            proc.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            left = _descendants(proc.pid)
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pid in left:  # what a killed fake could not clean up: its box processes
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        if proc.returncode == 0:
            shutil.rmtree(self.workdir, ignore_errors=True)
            return
        # Keep the log of a fake that did not end cleanly, and nothing else.
        for entry in self.workdir.iterdir() if self.workdir.is_dir() else ():
            if entry != self.log_path:
                shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        logger.warning(
            "the %s fake's process ended with code %s; its log is %s", self.name, proc.returncode, self.log_path
        )


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, parent in parents.items() if parent == pid]
        found += kids
        frontier += kids
    return found


def _service(info: dict[str, Any], client: ControlClient, stop: Callable[[], None]) -> FakeService:
    return FakeService(
        name=str(info["name"]),
        env=dict(info["env"]),
        world=info["root"],
        secret_vars=frozenset(info.get("secret_vars") or ()),
        credential_var=info.get("credential_var"),
        paths_note=str(info.get("paths_note") or ""),
        pid=info.get("pid"),
        control=client.address,
        _stop=stop,
    )


class PendingFake:
    """A fake's process that is starting: ``result()`` waits until it serves, ``stop()`` ends it either way.

    Lets the kit do its own setup (contract, host) while the fake's process imports and starts.
    """

    def __init__(self, name: str, workdir: Path, options: FakeOptions):
        services.check_name(name)
        if name not in services.SERVERS:
            raise FakeError(f"the {name} fake is not a server and cannot run in its own process")
        self._child = _Child(name, Path(workdir), options)
        self._client: ControlClient | None = None

    def result(self, timeout: float = READY_TIMEOUT_S) -> FakeService:
        child = self._child
        try:
            self._client = ControlClient(child.wait_ready(timeout), label=child.name, describe_failure=child.describe)
            info = self._client.hello()
        except BaseException as exc:
            self.stop()
            if isinstance(exc, ControlError):
                raise FakeError(str(exc)) from None
            raise
        return _service(info, self._client, self.stop)

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
        self._child.stop()


def launch(name: str, workdir: Path, options: FakeOptions | None = None) -> PendingFake:
    """Start fake ``name`` in its own process and return at once; ``workdir`` belongs to it."""
    return PendingFake(name, workdir, options or FakeOptions())


def spawn(
    name: str, workdir: Path, options: FakeOptions | None = None, *, timeout: float = READY_TIMEOUT_S
) -> FakeService:
    """Fake ``name`` serving from its own process; ``workdir`` belongs to it and is removed by ``stop()``."""
    return launch(name, workdir, options).result(timeout)


def attach(address: str, *, expect: str | None = None) -> FakeService:
    """A fake started by hand (``hermes-backend-kit fake serve``), reached at its control address.

    The run holds the fake's lease until ``stop()``, which clears the faults
    the run armed and leaves the fake serving.
    """
    try:
        client = ControlClient(address, label=expect or "attached")
        info = client.hello()
    except ControlError as exc:
        raise FakeError(
            f"{exc} (the address comes from `hermes-backend-kit fake serve`, passed with "
            f"--fake-control or {CONTROL_VAR})"
        ) from None
    name = str(info["name"])
    if expect is not None and name != expect:
        client.close()
        other = (
            f"pass the address `hermes-backend-kit fake serve {expect}` prints"
            if expect in services.SERVERS
            else f"the {expect} fake is no server"
        )
        raise FakeError(
            f"the control address is a {name} fake's, but this run needs the {expect} fake: {other}, "
            f"or drop --fake-control (and unset {CONTROL_VAR})"
        )
    client.label = name
    try:
        client.request("lease", pid=os.getpid())
    except ControlError as exc:
        client.close()
        raise FakeError(str(exc)) from None
    world = info["root"]

    def stop() -> None:
        with contextlib.suppress(Exception):
            world.faults.clear()
        with contextlib.suppress(ControlError):
            client.request("release", pid=os.getpid())
        client.close()

    return _service(info, client, stop)


if __name__ == "__main__":
    sys.exit(main())
