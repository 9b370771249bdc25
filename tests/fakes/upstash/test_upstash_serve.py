"""`hermes-backend-kit fake serve upstash` in its own process, and backpressure measured on that process."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from upstash_box import Box, BoxError

from tests.served import serve

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
MIB = 1024 * 1024


def _stop(proc: subprocess.Popen[str], signum: int = signal.SIGINT) -> int:
    proc.send_signal(signum)
    return proc.wait(15)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    served = serve("upstash")
    proc, exports = served.proc, served.exports
    try:
        yield proc, exports
    finally:
        if proc.poll() is None:
            _stop(proc)


def _kw(exports: dict[str, str]) -> dict[str, str]:
    return {"api_key": exports["UPSTASH_BOX_API_KEY"], "base_url": exports["UPSTASH_BOX_BASE_URL"]}


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def _descendant(pid: int, name: str) -> int | None:
    """The first process called ``name`` under ``pid``."""
    try:
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return None
    for child in children:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == name:
                return child
        except OSError:
            continue
        found = _descendant(child, name)
        if found:
            return found
    return None


def _written(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def test_serve_prints_exports_and_stops_on_ctrl_c(tmp_path):
    served = serve("upstash", "--api-key", "ubx_cli_key", "--host", "127.0.0.1")
    proc, exports, lines = served.proc, served.exports, served.lines
    assert exports["UPSTASH_BOX_API_KEY"] == "ubx_cli_key"
    assert exports["UPSTASH_BOX_BASE_URL"].startswith("http://127.0.0.1:")
    assert exports["UPSTASH_DISABLE_TELEMETRY"] == "1"
    assert any(line.startswith("# paths: ") and "paths" in line for line in lines)
    box = Box.create(name="cli", **_kw(exports))
    handle = box.exec.session(cmd="sleep 30")
    assert _stop(proc) == 0, "Ctrl-C must stop the fake cleanly"
    assert handle.wait(10) != 0
    assert not os.path.exists(f"/proc/{handle.pid}") or "Z" in Path(f"/proc/{handle.pid}/stat").read_text()


def test_serve_rejects_other_keys(served):
    _, exports = served
    with pytest.raises(BoxError) as info:
        Box.list(api_key="ubx_not_this_one", base_url=exports["UPSTASH_BOX_BASE_URL"])
    assert info.value.status_code == 401


def test_backpressure_a_client_that_stops_reading_stops_the_command(served):
    proc, exports = served
    box = Box.create(**_kw(exports))
    gate = threading.Event()
    received = [0]
    try:
        _stall_and_measure(proc, box, gate, received)
    finally:
        gate.set()  # never leave the SDK's reader thread parked


def _stall_and_measure(proc: subprocess.Popen[str], box: Box, gate: threading.Event, received: list[int]) -> None:

    def stalled(data: bytes) -> None:
        gate.wait(30)
        received[0] += len(data)

    baseline = _kib(proc.pid, "VmRSS")
    total = 400 * MIB
    handle = box.exec.session(cmd=f"head -c {total} /dev/zero; touch /workspace/home/finished", on_stdout=stalled)
    peak, writer = baseline, None
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        peak = max(peak, _kib(proc.pid, "VmRSS"))
        writer = writer or _descendant(handle.pid, "head")
        time.sleep(0.02)
    assert writer is not None, "the writing command was not found"
    written = _written(writer)
    time.sleep(0.5)
    still = _written(writer)
    peak = max(peak, _kib(proc.pid, "VmRSS"))
    growth_mib = (peak - baseline) / 1024
    print(
        f"\nbackpressure: server RSS {baseline / 1024:.1f} MiB -> peak {peak / 1024:.1f} MiB "
        f"(+{growth_mib:.1f} MiB); the command wrote {written / MIB:.1f} MiB of {total / MIB:.0f} MiB, "
        f"then {(still - written) / MIB:.2f} MiB more in 0.5 s"
    )
    assert still == written, "the command kept writing while nobody read: output is being buffered somewhere"
    assert written < 64 * MIB, f"{written / MIB:.0f} MiB left the command before it blocked"
    assert growth_mib < 32, f"the server's memory grew by {growth_mib:.0f} MiB while the client did not read"
    with pytest.raises(BoxError) as info:
        box.files.stat("finished")
    assert info.value.status_code == 404
    gate.set()
    handle.close()  # leaving before the exit kills the command
    assert handle.wait(5) == -1
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{writer}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{writer}"), "the blocked command outlived its session"
