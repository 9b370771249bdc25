"""faults: a sandbox destroyed mid-command, and an output flood.

The deletion happens behind the backend's back through the harness world;
memory is measured on this process (the host), where Hermes would hold
the output.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from conformance.checks._support import nonce, out, rc, run
from conformance.host.calls import Call, CallHung

pytestmark = pytest.mark.usefixtures("kit")

MIB = 1024 * 1024


# ------------------------------------------------------------------ vanished sandbox
@pytest.mark.clause("faults.vanished-mid-command")
def test_sandbox_deleted_mid_command_does_not_hang(kit, env):
    timeout = 2
    value = nonce("vanish")
    relpath = f".kit-{value}"
    started = time.monotonic()
    # The command announces itself under $HOME, then runs far longer than its timeout.
    call = Call(env.execute, f"printf '%s' {value} > \"$HOME\"/{relpath}; sleep 30", timeout=timeout)
    sandbox = None
    while sandbox is None and not call.done and time.monotonic() < started + timeout + 5:
        sandbox = kit.world.locate(relpath, value)
        if sandbox is None:
            time.sleep(0.05)
    if sandbox is None:
        early = ""
        if call.done:
            try:
                early = f" (execute() returned first: {call.result(1)!r})"
            except Exception as exc:
                early = f" (execute() raised first: {type(exc).__name__}: {exc})"
        raise AssertionError(f"the harness never saw the long command start in any sandbox{early}")
    kit.world.delete(sandbox)
    deleted = time.monotonic()
    try:
        result = call.result(max(0.0, started + timeout + 5 - time.monotonic()),
                             what="execute() in a sandbox deleted mid-command")
    except CallHung as exc:
        raise AssertionError(
            f"the sandbox was deleted {deleted - started:.1f}s into a command with timeout={timeout}, and execute() "
            f"had not returned or raised {timeout + 5}s after it started: {exc}"
        ) from None
    except Exception:
        return  # raising is an allowed outcome
    assert rc(result) != 0, (
        f"execute() in a sandbox deleted mid-command returned returncode {result.get('returncode')!r} "
        f"(a missing returncode reads as 0) with output {out(result)[-200:]!r}; it must fail"
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
    assert rc(result) == 0, f"the 256 MiB flood did not complete: returncode {rc(result)}, output tail {out(result)[-200:]!r}"
    assert peak.growth_bytes < 128 * MIB, (
        f"the host process's resident memory grew by {peak.growth_bytes / MIB:.0f} MiB while a 256 MiB flood ran "
        f"with bounded_capture=True ({len(out(result))} characters returned); the limit is 128 MiB"
    )
