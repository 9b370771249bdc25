"""Replay each Hermes caller of ``env.execute`` with its real call pattern.

- terminal: explicit cwd on every call, bounded capture, the session cwd
  recorded only when the result says cwd_observed; an exception is exit code
  124 when its text says "timeout", else retried 3 times (Hermes waits 2, 4
  and 8 s; the kit scales that down) and then exit code -1;
- file tools: full-fidelity reads through one compound probe split by random
  sentinels, writes streamed through stdin into a temp file then moved;
- execute_code: base64-shipped script run while a second thread polls and
  answers its RPC request files with execute() calls of its own;
- background processes: a detached nohup job whose pid is echoed, then
  polled and killed by later calls;
- the prompt-time probe: its own environment, one printf with timeout=4, then
  cleanup(force_remove=True) when cleanup() declares the keyword.

Every call goes through ``bounded`` so a hung backend fails instead of hanging.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shlex
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.host.calls import Call, CallHung, bounded

GRACE_S = 10.0  # slack over a call's own timeout before the kit calls it hung


def run(env: Any, command: str, *, timeout: int = 30, **kwargs: Any) -> dict[str, Any]:
    """execute() with a deadline; the raw result dict."""
    return bounded(
        env.execute, command, timeout=timeout, deadline=timeout + GRACE_S, what=f"execute({command[:60]!r})", **kwargs
    )


def returncode(result: dict[str, Any]) -> int:
    """What every Hermes consumer reads: a missing returncode counts as 0."""
    return int(result.get("returncode", 0) or 0)


# --------------------------------------------------------------------- terminal
# The terminal tool's foreground loop: one attempt and MAX_RETRIES more after an
# exception from execute(), the n-th retry after 2**n seconds (2, 4, 8); an
# exception whose lower-cased text contains TIMEOUT_WORD ends the loop at once as
# exit code 124, and the last exception as exit code -1.
MAX_RETRIES = 3
TIMEOUT_WORD = "timeout"
DELAY_SCALE = 0.05  # the kit waits 0.1, 0.2 and 0.4 s where Hermes waits 2, 4 and 8 s


@dataclass
class TerminalSession:
    cwd: str | None = None


@dataclass
class TerminalOutcome:
    output: str
    exit_code: int
    error: str | None = None
    attempts: int = 1
    result: dict[str, Any] = field(default_factory=dict)
    raised: list[str] = field(default_factory=list)  # "Type: text" of each exception execute() raised
    seconds: list[float] = field(default_factory=list)  # how long each attempt took


def retry_delay(retry: int, scale: float = DELAY_SCALE) -> float:
    """Seconds before the ``retry``-th retry (1-based): Hermes's 2**retry, times ``scale``."""
    return scale * 2.0**retry


def terminal(
    env: Any,
    command: str,
    session: TerminalSession,
    *,
    timeout: int = 30,
    workdir: str | None = None,
    delay_scale: float = DELAY_SCALE,
) -> TerminalOutcome:
    """One foreground terminal-tool call: Hermes's retry loop with its delays scaled by ``delay_scale``."""
    retries = 0
    raised: list[str] = []
    seconds: list[float] = []
    while True:
        cwd = workdir or session.cwd or env.cwd  # resolved again for every attempt, as Hermes does
        began = time.monotonic()
        try:
            result = run(env, command, timeout=timeout, cwd=cwd, bounded_capture=True)
        except CallHung:
            raise  # the kit's own deadline: the backend hung, which Hermes would not survive either
        except Exception as exc:
            seconds.append(time.monotonic() - began)
            text = str(exc)
            raised.append(f"{type(exc).__name__}: {text}")
            if TIMEOUT_WORD in text.lower():
                return TerminalOutcome(
                    "", 124, f"Command timed out after {timeout} seconds", retries + 1, raised=raised, seconds=seconds
                )
            if retries < MAX_RETRIES:
                retries += 1
                time.sleep(retry_delay(retries, delay_scale))
                continue
            return TerminalOutcome(
                "",
                -1,
                f"Command execution failed: {type(exc).__name__}: {text}",
                retries + 1,
                raised=raised,
                seconds=seconds,
            )
        seconds.append(time.monotonic() - began)
        if result.get("cwd_observed"):
            session.cwd = result.get("cwd") or env.cwd
        return TerminalOutcome(
            result.get("output", ""), returncode(result), None, retries + 1, result, raised=raised, seconds=seconds
        )


# --------------------------------------------------------------------- file tools
class FileOps:
    """The shell commands ShellFileOperations sends, with the same shapes."""

    def __init__(self, env: Any, timeout: int = 60):
        self.env = env
        self.timeout = timeout

    def _exec(self, command: str, **kwargs: Any) -> dict[str, Any]:
        return run(self.env, command, timeout=self.timeout, cwd=self.env.cwd, **kwargs)

    def write_file(self, path: str, content: str) -> dict[str, Any]:
        q = shlex.quote(path)
        parent = shlex.quote(path.rsplit("/", 1)[0] or "/")
        command = (
            f'mkdir -p {parent} && tmp=$(mktemp -p {parent} .hermes-write.XXXXXX) && cat > "$tmp" && mv -f "$tmp" {q}'
        )
        return self._exec(command, stdin_data=content)

    def sha256(self, path: str) -> str | None:
        result = self._exec(f"sha256sum -- {shlex.quote(path)}")
        if returncode(result) != 0:
            return None
        return result.get("output", "").split()[0] if result.get("output", "").split() else None

    def read_bytes(self, path: str) -> bytes | None:
        tag = uuid.uuid4().hex
        result = self._exec(f"echo B{tag}; base64 -- {shlex.quote(path)} && echo E{tag}")
        out = result.get("output", "")
        if returncode(result) != 0 or f"E{tag}" not in out:
            return None
        body = out.split(f"B{tag}", 1)[1].split(f"E{tag}", 1)[0]
        return base64.b64decode("".join(body.split()))

    def read_probe(self, path: str, first_line: int = 1, last_line: int = 50) -> dict[str, str] | None:
        """The compound read: size, lines, a line range, base64 head, between sentinels."""
        q = shlex.quote(path)
        marks = [f"__S{uuid.uuid4().hex[:16]}__" for _ in range(5)]
        command = (
            f"[ -f {q} ] || {{ echo NOFILE; exit 2; }}; echo {marks[0]}; wc -c < {q}; echo {marks[1]}; "
            f"wc -l < {q}; echo {marks[2]}; sed -n '{first_line},{last_line}p' {q}; echo {marks[3]}; "
            f"head -c 4096 {q} | base64; echo {marks[4]}"
        )
        result = self._exec(command)
        out = result.get("output", "")
        if returncode(result) != 0 or not all(m in out for m in marks):
            return None
        parts = {}
        for name, start, end in zip(("size", "lines", "range", "head_b64"), marks, marks[1:], strict=False):
            body = out.split(start, 1)[1].split(end, 1)[0]
            parts[name] = body[1:] if body.startswith("\n") else body
        return parts


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------- execute_code
_RPC_SCRIPT = r"""
import json, os, sys, time
rpc = os.environ["HERMES_RPC_DIR"]
total = 0
for seq in range(int(sys.argv[1])):
    req = os.path.join(rpc, f"req_{seq:04d}")
    with open(req + ".tmp", "w") as fh:
        json.dump({"seq": seq, "tool": "double", "args": {"n": seq}}, fh)
    os.rename(req + ".tmp", req)
    res = os.path.join(rpc, f"res_{seq:04d}")
    deadline = time.time() + 20
    while not os.path.exists(res):
        if time.time() > deadline:
            print("rpc timeout", seq); sys.exit(3)
        time.sleep(0.02)
    with open(res) as fh:
        total += json.load(fh)["result"]
print("total", total)
"""


@dataclass
class ExecuteCodeOutcome:
    result: dict[str, Any]
    answered: int
    poll_errors: list[str]


def execute_code(
    env: Any, *, calls: int = 3, timeout: int = 60, answer: Callable[[dict[str, Any]], Any] | None = None
) -> ExecuteCodeOutcome:
    """Ship and run a script that makes ``calls`` RPCs; a poller thread answers them."""
    answer = answer or (lambda req: req["args"]["n"] * 2)
    tmp = env.get_temp_dir() if callable(getattr(env, "get_temp_dir", None)) else "/tmp"
    work = f"{tmp.rstrip('/')}/hermes_exec_{uuid.uuid4().hex[:8]}"
    rpc = f"{work}/rpc"
    run(env, f"mkdir -p {shlex.quote(rpc)}", timeout=15, cwd="/")
    encoded = base64.b64encode(_RPC_SCRIPT.encode()).decode()
    run(env, f"echo '{encoded}' | base64 -d > {shlex.quote(work)}/script.py", timeout=30, cwd="/")
    answered = 0
    errors: list[str] = []
    stop = threading.Event()

    def poll() -> None:
        nonlocal answered
        while not stop.is_set():
            try:
                listing = run(env, f"ls -1 {shlex.quote(rpc)}/ 2>/dev/null | grep '^req_[0-9]*$'", timeout=10, cwd="/")
                for name in listing.get("output", "").split():
                    req_path = f"{rpc}/{name}"
                    body = run(env, f"cat {shlex.quote(req_path)}", timeout=10, cwd="/").get("output", "")
                    request = json.loads(body)
                    response = base64.b64encode(json.dumps({"result": answer(request)}).encode()).decode()
                    seq = name.split("_", 1)[1]
                    res = f"{rpc}/res_{seq}"
                    run(
                        env,
                        f"echo '{response}' | base64 -d > {shlex.quote(res)}.tmp && "
                        f"mv {shlex.quote(res)}.tmp {shlex.quote(res)}",
                        timeout=60,
                        cwd="/",
                    )
                    run(env, f"rm -f {shlex.quote(req_path)}", timeout=5, cwd="/")
                    answered += 1
            except Exception as exc:  # recorded; the script then times out its RPC
                errors.append(f"{type(exc).__name__}: {exc}")
            stop.wait(0.05)

    poller = threading.Thread(target=poll, daemon=True, name="execute-code-poller")
    poller.start()
    try:
        result = run(
            env,
            f"cd {shlex.quote(work)} && HERMES_RPC_DIR={shlex.quote(rpc)} "
            f"PYTHONDONTWRITEBYTECODE=1 python3 script.py {calls}",
            timeout=timeout,
            cwd="/",
        )
    finally:
        stop.set()
        poller.join(15)
        try:
            run(env, f"rm -rf {shlex.quote(work)}", timeout=15, cwd="/")
        except Exception:
            pass
    return ExecuteCodeOutcome(result, answered, errors)


# --------------------------------------------------------------------- background processes
JOB_MARK = "kit-job-state:"  # opens the liveness probe's answer line


@dataclass
class BackgroundJob:
    pid: int
    log: str
    pid_file: str
    exit_file: str


class Background:
    """spawn_via_env and its poller: one detached job per spawn."""

    def __init__(self, env: Any):
        self.env = env
        tmp = env.get_temp_dir() if callable(getattr(env, "get_temp_dir", None)) else "/tmp"
        self.tmp = tmp.rstrip("/") or "/"

    def spawn(self, command: str) -> tuple[BackgroundJob | None, dict[str, Any], float]:
        job_id = uuid.uuid4().hex[:10]
        base = f"{self.tmp}/hermes_bg_{job_id}"
        log, pid_file, exit_file = f"{base}.log", f"{base}.pid", f"{base}.exit"
        inner = shlex.quote(command)
        bg = (
            f"mkdir -p {shlex.quote(self.tmp)}; "
            f"( nohup bash -lc {inner} > {shlex.quote(log)} 2>&1; rc=$?; "
            f"printf '%s' \"$rc\" > {shlex.quote(exit_file)} ) > /dev/null 2>&1 & "
            f"echo $! > {shlex.quote(pid_file)}; cat {shlex.quote(pid_file)}"
        )
        started = time.monotonic()
        result = run(self.env, bg, timeout=10, rewrite_compound_background=False)
        elapsed = time.monotonic() - started
        pid = next((int(line) for line in result.get("output", "").split() if line.strip().isdigit()), None)
        job = BackgroundJob(pid, log, pid_file, exit_file) if pid else None
        return job, result, elapsed

    def alive(self, job: BackgroundJob) -> bool:
        """kill -0 as Hermes's poller does, but a zombie waiting to be reaped counts as dead.

        The answer is a marked line of its own, so a probe whose output carries other text (a transport's
        warnings) still answers; a probe with no answer at all (it never ran: ssh's exit 255) is asked again,
        and after three tries is an error, never taken for a dead job."""
        pid = f'"$(cat {shlex.quote(job.pid_file)})"'
        probe = (
            f'p={pid}; kill -0 "$p" 2>/dev/null || {{ echo {JOB_MARK}dead; exit 0; }}; '
            "s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f1); "
            f'[ "$s" = Z ] && echo {JOB_MARK}dead || echo {JOB_MARK}alive'
        )
        seen: dict[str, Any] = {}
        for attempt in range(3):
            if attempt:
                time.sleep(0.2)
            seen = run(self.env, probe, timeout=10)
            answers = [
                line.strip()[len(JOB_MARK) :]
                for line in str(seen.get("output", "")).splitlines()
                if line.strip().startswith(JOB_MARK)
            ]
            if answers:
                return answers[-1] == "alive"
        raise RuntimeError(
            f"the liveness probe of background job {job.pid} got no answer in three tries (last: returncode "
            f"{seen.get('returncode')}, output {str(seen.get('output', ''))[-200:]!r}): the environment did not "
            "run it, which says nothing about the job"
        )

    def log(self, job: BackgroundJob) -> str:
        output: str = run(self.env, f"cat {shlex.quote(job.log)} 2>/dev/null", timeout=10).get("output", "")
        return output

    def exit_status(self, job: BackgroundJob) -> str | None:
        out = run(self.env, f"cat {shlex.quote(job.exit_file)} 2>/dev/null", timeout=10).get("output", "").strip()
        return out or None

    def kill(self, job: BackgroundJob) -> dict[str, Any]:
        return run(self.env, f"kill {job.pid}", timeout=5)


# --------------------------------------------------------------------- prompt probe
PROMPT_PROBE_COMMAND = (
    "printf 'os=%s\\nkernel=%s\\nhome=%s\\ncwd=%s\\nuser=%s\\n' "
    '"$(uname -s 2>/dev/null)" "$(uname -r 2>/dev/null)" "$HOME" "$(pwd)" '
    '"$(id -un 2>/dev/null || whoami 2>/dev/null)"'
)


@dataclass
class ProbeOutcome:
    env: Any
    result: dict[str, Any] | None
    fields: dict[str, str]
    error: BaseException | None
    seconds: float
    cleanup_error: BaseException | None = None  # what the probe's own teardown raised


def _probe_teardown(env: Any) -> BaseException | None:
    """The probe's finally: _cleanup_env(env, force_remove=True), bounded; what it raised, if anything."""
    from conformance.host.lifecycle import cleanup_env

    try:
        bounded(
            cleanup_env, env, force_remove=True, deadline=30, what="cleanup(force_remove=True) of the probe environment"
        )
    except AssertionError:
        raise
    except Exception as exc:
        return exc
    return None


def prompt_probe(create: Callable[[str], Any]) -> ProbeOutcome:
    """Create the probe environment, run the probe once, tear it down as the host does."""
    started = time.monotonic()
    env = None
    try:
        env = bounded(create, "prompt-backend-probe", deadline=60, what="create_environment(prompt-backend-probe)")
    except AssertionError:
        raise
    except Exception as exc:
        return ProbeOutcome(env, None, {}, exc, time.monotonic() - started)
    try:
        result = run(env, PROMPT_PROBE_COMMAND, timeout=4)
    except AssertionError:
        _probe_teardown(env)
        raise
    except Exception as exc:
        seconds = time.monotonic() - started
        return ProbeOutcome(env, None, {}, exc, seconds, _probe_teardown(env))
    seconds = time.monotonic() - started
    cleanup_error = _probe_teardown(env)
    fields = {}
    for line in result.get("output", "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("os", "kernel", "home", "cwd", "user"):
            fields[key] = value
    return ProbeOutcome(env, result, fields, None, seconds, cleanup_error)


# --------------------------------------------------------------------- interrupts
def interrupted(
    env: Any, command: str, *, after_s: float, timeout: int = 30, **kwargs: Any
) -> tuple[dict[str, Any], float]:
    """Run ``command`` and raise the agent's interrupt on its thread after ``after_s``."""
    call = Call(env.execute, command, timeout=timeout, **kwargs)
    time.sleep(after_s)
    raised = time.monotonic()
    call.interrupt()
    result = call.result(timeout + GRACE_S, what=f"interrupted execute({command[:40]!r})")
    return result, time.monotonic() - raised
