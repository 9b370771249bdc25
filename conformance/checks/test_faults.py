"""faults: a sandbox destroyed mid-command, errors that are not timeouts, and an output flood.

Deletions and broken states happen behind the backend's back through the
harness world; commands go through Hermes's terminal tool, which runs a
command again after execute() raises and reads an exception that says
"timeout" as exit 124 (checks/_run_count.py).  Memory is measured on this
process (the host), where Hermes would hold the output.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.checks._run_count import count_runs, counting, describe, drive, started_in
from conformance.checks._support import locate, out, rc, run, unverified
from conformance.host.calls import Call
from conformance.host.drivers import GRACE_S, MAX_RETRIES, TerminalOutcome

pytestmark = pytest.mark.usefixtures("kit")

MIB = 1024 * 1024


# ------------------------------------------------------------------ vanished sandbox
@pytest.mark.clause("faults.vanished-mid-command")
def test_sandbox_deleted_mid_command_fails_it_once(kit, env):
    timeout = 2
    # The command's record shows its start, then it runs far longer than its timeout.
    command, record = counting(kit, env, "vanish", "sleep 30")
    started = time.monotonic()
    call = Call(drive, env, command, timeout=timeout)
    sandbox = None
    while sandbox is None and not call.done and time.monotonic() < started + timeout + 5:
        sandbox = started_in(kit, record)
        if sandbox is None:
            time.sleep(0.05)
    if sandbox is None:
        early = ""
        if call.done:
            try:
                early = f" ({describe(call.result(1))} first)"
            except Exception as exc:
                early = f" (the terminal call failed first: {type(exc).__name__}: {exc})"
        raise AssertionError(f"the harness never saw the long command start in any sandbox{early}")
    kit.world.delete(sandbox)
    deleted = time.monotonic()
    # Each attempt may take timeout + GRACE_S before the driver calls it hung.
    outcome: TerminalOutcome = call.result(
        (MAX_RETRIES + 1) * (timeout + GRACE_S + 1), what="the terminal call in a sandbox deleted mid-command"
    )
    fault = f"the sandbox was deleted {deleted - started:.1f}s into a command with timeout={timeout}"
    again = count_runs(kit, env, record, expect=0, exclude=frozenset({sandbox}))
    assert again.runs == 0, (
        f"{fault}, and the command ran {again.runs} more time(s) after it (in a replacement sandbox): "
        f"{'Hermes ran it again after execute() raised' if outcome.raised else 'the backend sent it again'}; "
        f"{describe(outcome)}"
    )
    assert not outcome.raised, (
        f"{fault}, and {describe(outcome)}; the command had started, so execute() must return a non-zero "
        "result: Hermes runs a command again after an exception"
    )
    assert outcome.seconds[0] <= timeout + 5, (
        f"{fault}, and execute() returned {outcome.seconds[0]:.1f}s after the command started; the limit is "
        f"{timeout + 5}s"
    )
    assert outcome.exit_code != 0, f"{fault}, and {describe(outcome)} (a missing returncode reads as 0); it must fail"


# ------------------------------------------------------------------ "timeout" only for timeouts
def _said_timeout(situation: str, outcome: TerminalOutcome, timeout: int) -> str | None:
    """A finding when Hermes read an exception of this call as the command's timeout."""
    if outcome.raised and outcome.exit_code == 124:
        return (
            f"{situation}: {describe(outcome)}, i.e. 'Command timed out after {timeout} seconds' for a command "
            "that never reached its timeout"
        )
    return None


@pytest.mark.clause("errors.no-timeout-word")
def test_only_a_timeout_raises_an_error_that_says_timeout(kit, make_env):
    timeout = 30  # far longer than anything here takes: no command can time out
    findings: list[str | None] = []
    unfired: list[str] = []

    env = make_env()
    kit.world.fail(locate(kit, env, "broken"))
    findings.append(
        _said_timeout(
            "the sandbox was put in the error state behind the backend's back",
            drive(env, "echo should-not-run", timeout=timeout),
            timeout,
        )
    )

    if kit.has("transport-faults"):
        script = kit.world.faults
        failures: list[tuple[str, str, dict[str, Any]]] = [
            (
                "the service answered 500 to every command call",
                "exec",
                {"status": 500, "message": "Internal server error"},
            ),
            (
                "the service answered 503 to every read of sandbox state",
                "read",
                {"status": 503, "message": "Service temporarily unavailable"},
            ),
        ]
        for situation, role, params in failures:
            env = make_env()
            assert rc(run(env, "true")) == 0, "a plain command failed before any fault was armed"
            armed = script.arm("status", role, times=-1, **params)
            try:
                findings.append(_said_timeout(situation, drive(env, "echo refused", timeout=timeout), timeout))
            finally:
                script.clear()
            if role == "exec" and armed.fired == 0:  # a read-free command is fine; a command-free one is not
                unfired.append(situation)

    found = [f for f in findings if f]
    assert not found, 'an exception that was not the command\'s timeout said "timeout": ' + "; ".join(found)
    if unfired:
        unverified(
            f"the fault never met the backend's command call ({'; '.join(unfired)}): no request reached "
            "the run's exec routes, so that failure was never observed"
        )


# ------------------------------------------------------------------ output flood
def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class _PeakRss:
    """Peak resident memory of this process while a block runs (Linux /proc)."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._hwm_reset = False
        self.baseline = 0

    def __enter__(self) -> _PeakRss:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self._hwm_reset = True
        except OSError:
            self._hwm_reset = False
        self.baseline = _status_kib("VmRSS") or 0
        self._thread = threading.Thread(target=self._sample, daemon=True, name="rss-sampler")
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            value = _status_kib("VmRSS")
            if value is not None:
                self.samples.append(value)
            self._stop.wait(0.005)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        if self._hwm_reset:
            hwm = _status_kib("VmHWM")
            if hwm is not None:
                self.samples.append(hwm)

    @property
    def growth_bytes(self) -> int:
        return (max(self.samples, default=self.baseline) - self.baseline) * 1024


@pytest.mark.clause("faults.output-flood")
def test_output_flood_keeps_host_memory_bounded(env):
    if _status_kib("VmRSS") is None:
        raise AssertionError("cannot read /proc/self/status to measure this process's memory")
    with _PeakRss() as peak:
        result = run(env, "head -c 268435456 /dev/zero", timeout=120, bounded_capture=True)
    assert rc(result) == 0, (
        f"the 256 MiB flood did not complete: returncode {rc(result)}, output tail {out(result)[-200:]!r}"
    )
    assert peak.growth_bytes < 128 * MIB, (
        f"the host process's resident memory grew by {peak.growth_bytes / MIB:.0f} MiB while a 256 MiB flood ran "
        f"with bounded_capture=True ({len(out(result))} characters returned); the limit is 128 MiB"
    )
