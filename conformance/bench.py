"""Benchmarks: round-trip latency and streaming throughput per backend, in one process.

    python -m conformance.bench [--backend NAME ...] [--mib 100] [--rounds 50] [--out bench/results.json]

Every figure is reported absolute and as a ratio to a baseline measured in
the same run: plain local ``bash -c`` through subprocess (no Hermes host, no
sandbox) and tempdir_box.  Peak RSS growth is this process's high-water mark
(VmHWM, reset before each measurement) minus its resident size just before.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


@dataclass
class Figures:
    backend: str
    rtt_p50_ms: float
    rtt_p95_ms: float
    stream_mib: int
    stream_mib_s: float
    peak_rss_growth_mib: float
    stream_returncode: int | None = None


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def _reset_hwm() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _latencies(call: Callable[[], Any], rounds: int) -> tuple[float, float]:
    samples = []
    call()  # warm up
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


def _stream(call: Callable[[], Any], mib: int) -> tuple[float, float, Any]:
    _reset_hwm()
    before = _status_kib("VmRSS")
    started = time.perf_counter()
    value = call()
    elapsed = time.perf_counter() - started
    growth = max(0, _status_kib("VmHWM") - before) / 1024
    return mib / elapsed, growth, value


def _flood_command(mib: int) -> str:
    return f"head -c {mib * MIB} /dev/zero | tr '\\0' x"


def bench_local_bash(mib: int, rounds: int) -> Figures:
    p50, p95 = _latencies(lambda: subprocess.run(["bash", "-c", "true"], check=True), rounds)

    def stream() -> int:
        proc = subprocess.Popen(["bash", "-c", _flood_command(mib)], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        while proc.stdout.read(65536):
            pass
        return proc.wait()

    rate, growth, code = _stream(stream, mib)
    return Figures("local bash -c (baseline)", p50, p95, mib, rate, growth, code)


def bench_backend(name: str, mib: int, rounds: int, workdir: Path) -> Figures:
    from conformance.host.drivers import returncode
    from conformance.run import KitRun, RunOptions

    run = KitRun.start(RunOptions(backend=name), workdir / name)
    try:
        env = run.create(persistent=False)
        try:
            p50, p95 = _latencies(lambda: env.execute("true", timeout=60), rounds)
            rate, growth, result = _stream(
                lambda: env.execute(_flood_command(mib), timeout=600, bounded_capture=True), mib)
        finally:
            run.release(env)
    finally:
        run.close()
    return Figures(name, p50, p95, mib, rate, growth, returncode(result))


def table(rows: list[Figures]) -> list[str]:
    base, ref = rows[0], next((r for r in rows if r.backend == "tempdir_box"), rows[0])
    lines = [
        "| backend | p50 round trip (ms) | vs bash | vs tempdir_box | p95 (ms) | stream MiB/s | vs bash "
        "| peak RSS growth (MiB) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.backend} | {r.rtt_p50_ms:.1f} | {r.rtt_p50_ms / base.rtt_p50_ms:.1f}x | "
            f"{r.rtt_p50_ms / ref.rtt_p50_ms:.2f}x | {r.rtt_p95_ms:.1f} | {r.stream_mib_s:.0f} | "
            f"{r.stream_mib_s / base.stream_mib_s:.2f}x | {r.peak_rss_growth_mib:.1f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", default=None,
                        help="known backend to measure (repeatable; default: tempdir_box and upstash_box)")
    parser.add_argument("--mib", type=int, default=100, help="output streamed through execute() (default 100)")
    parser.add_argument("--rounds", type=int, default=50, help="round trips of `true` per backend (default 50)")
    parser.add_argument("--out", default="bench/results.json")
    args = parser.parse_args(argv)
    backends = args.backend or ["tempdir_box", "upstash_box"]
    if "tempdir_box" not in backends:
        backends.insert(0, "tempdir_box")  # the ratio's reference is measured in the same run
    rows = [bench_local_bash(args.mib, args.rounds)]
    with tempfile.TemporaryDirectory(prefix="kit-bench-") as tmp:
        for name in backends:
            print(f"measuring {name} ...", file=sys.stderr, flush=True)
            rows.append(bench_backend(name, args.mib, args.rounds, Path(tmp)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"figures": [asdict(r) for r in rows], "mib": args.mib, "rounds": args.rounds},
                              indent=2) + "\n")
    markdown = "\n".join(table(rows))
    out.with_suffix(".md").write_text(markdown + "\n")
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
