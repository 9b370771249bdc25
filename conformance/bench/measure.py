"""Measurement primitives: timers, percentiles, this process's RSS high-water mark."""

from __future__ import annotations

import ctypes
import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

KIB = 1024
MIB = 1024 * KIB
T = TypeVar("T")


def parse_size(text: str) -> int:
    """'64K', '4M', '100MiB', '512' -> bytes."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    for suffix, factor in (("K", KIB), ("M", MIB), ("G", 1024 * MIB)):
        if t.endswith(suffix):
            return int(float(t[:-1]) * factor)
    return int(t)


def human_size(n: int) -> str:
    for unit, factor in (("GiB", 1024 * MIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} B"


def percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of the samples."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _settle() -> None:
    """Return freed memory to the OS so an earlier run's heap does not hide this run's growth."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@dataclass
class Sample:
    seconds: float
    rss_growth_mib: float  # peak resident size during the call minus resident size before it
    value: Any


def measured(call: Callable[[], T]) -> Sample:
    """Time ``call`` and record how far this process's peak RSS rose above where it started.

    VmHWM is reset through /proc/self/clear_refs (5), so the peak is this call's;
    the fakes serve from their own process, so the figure is the backend's and the host's memory alone.
    """
    _settle()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    before = _status_kib("VmRSS")
    started = time.perf_counter()
    value = call()
    elapsed = time.perf_counter() - started
    growth = max(0, _status_kib("VmHWM") - before) / 1024
    return Sample(elapsed, growth, value)


def timed_ms(call: Callable[[], Any], rounds: int) -> list[float]:
    """Wall time of ``rounds`` calls in milliseconds, after one unmeasured warm-up call."""
    call()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def flood_command(size: int) -> str:
    """Shell writing exactly ``size`` bytes of printable output (one long line, as the old bench did)."""
    return f"head -c {size} /dev/zero | tr '\\0' x"
