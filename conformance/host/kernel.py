"""Replay execute_code's remote session kernel on a backend, call for call.

On a non-local backend Hermes keeps one Python interpreter per conversation
alive between execute_code calls.  The backend offers only run-to-completion
``execute()``, so the host builds the kernel out of plain commands, every one
with ``cwd="/"`` and the default keyword arguments:

- setup: ``umask 077 && mkdir -p <dir>/cells <dir>/rpc && chmod 700 ...`` (must exit 0);
- shipping a file: ``umask 077 && base64 -d > path`` with the base64 payload on
  stdin (``_stdin_mode == "pipe"``), or echoed into the pipe otherwise;
- launch: a subshell that sources an env file, deletes it, pre-creates
  ``runner.log`` with ``touch`` and ``chmod 600``, and starts the runner with
  ``nohup python3 ... &``, echoing ``PID:<pid>``.  The call must return at once
  while the runner keeps running detached;
- per cell: ``kill -0 <pid>`` (a dead runner means the state is lost), stale
  RPC files removed, the request shipped and renamed into place, the result
  file polled with ``cat`` and removed;
- kill: ``pkill -TERM -P <pid>; kill <pid>``, then ``rm -rf <dir>``.

The runner here is the kit's own: a loop that executes cell files in one
namespace and writes result files, exiting by itself after an idle period.
"""

from __future__ import annotations

import base64
import json
import shlex
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from conformance.host.drivers import returncode, run

CELL_POLL_S = 0.2  # Hermes polls every 0.5 s; the kit polls faster to stay quick

RUNNER_SOURCE = r"""
import contextlib, io, json, os, sys, time, traceback

KERNEL_DIR = os.environ["HERMES_KERNEL_DIR"]
CELLS = os.path.join(KERNEL_DIR, "cells")
IDLE_EXIT_S = float(sys.argv[1])


def write_result(name, payload):
    final = os.path.join(CELLS, name.replace("cell_req_", "cell_res_"))
    tmp = final + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(payload, fh)
    os.replace(tmp, final)


def serve():
    scope = {"__name__": "__hermes_kernel__"}
    count = 0
    idle_since = time.time()
    while True:
        waiting = sorted(n for n in os.listdir(CELLS) if n.startswith("cell_req_") and n.endswith(".json"))
        if not waiting:
            if time.time() - idle_since > IDLE_EXIT_S:
                return
            time.sleep(0.05)
            continue
        for name in waiting:
            path = os.path.join(CELLS, name)
            try:
                with open(path, encoding="utf-8") as fh:
                    request = json.load(fh)
            except (OSError, ValueError):
                continue  # still being written
            os.remove(path)
            count += 1
            captured = io.StringIO()
            status, trace = "ok", ""
            try:
                with contextlib.redirect_stdout(captured):
                    exec(compile(request["code"], "<cell %d>" % count, "exec"), scope)
            except SystemExit:
                status = "exit"
            except BaseException:
                status, trace = "error", traceback.format_exc()
            write_result(name, {"status": status, "stdout": captured.getvalue(), "traceback": trace,
                                "execution_count": count, "pid": os.getpid()})
            idle_since = time.time()
            if status == "exit":
                return


serve()
"""


def _sh(env: Any, command: str, timeout: int = 15, **kwargs: Any) -> dict[str, Any]:
    """One kernel call as Hermes makes it: cwd "/" and nothing else but the timeout."""
    return run(env, command, timeout=timeout, cwd="/", **kwargs)


def ship(env: Any, path: str, content: str, timeout: int = 30) -> dict[str, Any]:
    """Write ``content`` owner-only to ``path``: base64 on stdin, or echoed for heredoc backends."""
    encoded = base64.b64encode(content.encode("utf-8")).decode("ascii")
    target = shlex.quote(path)
    if getattr(env, "_stdin_mode", "pipe") == "pipe":
        return _sh(env, f"umask 077 && base64 -d > {target}", timeout, stdin_data=encoded)
    return _sh(env, f"umask 077 && echo '{encoded}' | base64 -d > {target}", timeout)


@dataclass
class CellOutcome:
    status: str  # ok, error, exit, timeout, protocol-error
    payload: dict[str, Any] = field(default_factory=dict)


@dataclass
class RemoteKernel:
    """The host's record of one detached kernel runner."""

    env: Any
    kernel_dir: str
    pid: str
    cells_run: int = 0

    @classmethod
    def spawn(cls, env: Any, *, idle_exit_s: float = 120.0) -> tuple[RemoteKernel | None, str]:
        """Start a runner; (kernel, "") or (None, what failed).  A failed spawn removes its directory."""
        tmp = env.get_temp_dir() if callable(getattr(env, "get_temp_dir", None)) else "/tmp"
        base = tmp.rstrip("/") if isinstance(tmp, str) and tmp.startswith("/") else "/tmp"
        kernel_dir = f"{base}/hermes_rkernel_{uuid.uuid4().hex[:12]}"
        q_dir = shlex.quote(kernel_dir)
        dirs = [f"{kernel_dir}/cells", f"{kernel_dir}/rpc"]
        try:
            setup = _sh(
                env,
                f"umask 077 && mkdir -p {' '.join(map(shlex.quote, dirs))} && "
                f"chmod 700 {' '.join(map(shlex.quote, [kernel_dir, *dirs]))}",
                15,
            )
            if returncode(setup) != 0:
                raise _SpawnFailed(
                    f"the private kernel directory could not be made: {setup.get('output', '')[-300:]!r}"
                )
            for name, content in (
                ("kernel_runner.py", RUNNER_SOURCE),
                (
                    "kernel.env",
                    f"HERMES_KERNEL_DIR={shlex.quote(kernel_dir)}\n"
                    f"HERMES_RPC_DIR={shlex.quote(kernel_dir + '/rpc')}\n"
                    "PYTHONDONTWRITEBYTECODE=1\n",
                ),
            ):
                shipped = ship(env, f"{kernel_dir}/{name}", content)
                if returncode(shipped) != 0:
                    raise _SpawnFailed(f"shipping {name} failed: {shipped.get('output', '')[-300:]!r}")
            launch = (
                f"cd {q_dir} && ( set -a && . ./kernel.env && set +a && rm -f ./kernel.env && "
                "touch runner.log && chmod 600 runner.log && "
                f"{{ nohup python3 kernel_runner.py {idle_exit_s:g} > runner.log 2>&1 & "
                'echo "PID:$!"; } )'
            )
            started = _sh(env, launch, 20)
            pid = next(
                (
                    line.strip()[4:].strip()
                    for line in started.get("output", "").splitlines()
                    if line.strip().startswith("PID:")
                ),
                "",
            )
            if not pid.isdigit():
                raise _SpawnFailed(
                    f"the launch printed no PID (returncode {returncode(started)}, "
                    f"output {started.get('output', '')[-300:]!r})"
                )
            kernel = cls(env, kernel_dir, pid)
            if not kernel.alive():
                log = _sh(env, f"cat {q_dir}/runner.log 2>/dev/null", 10).get("output", "")
                raise _SpawnFailed(
                    f"the runner (pid {pid}) was dead right after the launch; runner.log: {log[-300:]!r}"
                )
            return kernel, ""
        except _SpawnFailed as exc:
            _sh(env, f"rm -rf {q_dir}", 15)
            return None, str(exc)

    def alive(self) -> bool:
        """kill -0 through the backend, as before every cell."""
        out = _sh(self.env, f"kill -0 {shlex.quote(self.pid)} 2>/dev/null && echo ALIVE").get("output", "")
        return "ALIVE" in out

    def cell(self, code: str, timeout: float = 30.0) -> CellOutcome:
        """Run one cell: ship the request, rename it into place, poll for the result."""
        self.cells_run += 1
        seq = f"{self.cells_run:06d}"
        cells = f"{self.kernel_dir}/cells"
        q_cells = shlex.quote(cells)
        _sh(
            self.env,
            f"rm -f {shlex.quote(self.kernel_dir + '/rpc')}/req_* {shlex.quote(self.kernel_dir + '/rpc')}/res_*",
            10,
        )
        shipped = ship(self.env, f"{cells}/cell_req_{seq}.json.tmp", json.dumps({"id": seq, "code": code}))
        if returncode(shipped) != 0:
            return CellOutcome("protocol-error", {"error": f"shipping the cell failed: {shipped.get('output')!r}"})
        _sh(self.env, f"mv {q_cells}/cell_req_{seq}.json.tmp {q_cells}/cell_req_{seq}.json", 10)
        result = f"{q_cells}/cell_res_{seq}.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            body = _sh(self.env, f"cat {result} 2>/dev/null", 20).get("output", "").strip()
            if body:
                _sh(self.env, f"rm -f {result}", 10)
                try:
                    payload = json.loads(body)
                except ValueError:
                    return CellOutcome("protocol-error", {"body": body[-300:]})
                return CellOutcome(str(payload.get("status", "error")), payload)
            time.sleep(CELL_POLL_S)
        return CellOutcome("timeout")

    def kill(self) -> None:
        """Stop the runner's children and the runner, then remove its directory (best effort)."""
        q_pid = shlex.quote(self.pid)
        for command in (
            f"pkill -TERM -P {q_pid} 2>/dev/null; kill {q_pid} 2>/dev/null; true",
            f"rm -rf {shlex.quote(self.kernel_dir)}",
        ):
            try:
                _sh(self.env, command)
            except Exception:
                pass


class _SpawnFailed(RuntimeError):
    pass


def process_gone(env: Any, pid: str | int) -> bool:
    """kill -0 fails for ``pid``, or it is a zombie waiting to be reaped."""
    probe = (
        f'p={shlex.quote(str(pid))}; kill -0 "$p" 2>/dev/null || {{ echo gone; exit 0; }}; '
        "s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f1); "
        '[ "$s" = Z ] && echo gone || echo running'
    )
    output: str = _sh(env, probe, 10).get("output", "")
    return output.strip() == "gone"
