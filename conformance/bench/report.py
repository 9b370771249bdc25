"""Figures with their ratios to the baseline; results.json and results.md.

A ratio is always value / baseline value, whichever way is better: for
times above 1 is slower than local bash, for throughputs below 1 is.  RSS
growth is floored at 1 MiB on both sides, since growth under a MiB is page
noise and a near-zero baseline would make any ratio meaningless.
"""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import dataclass, field
from typing import Any, TypedDict

from conformance.bench import goals, network, suite, world
from conformance.bench.measure import human_size

SCHEMA = "hermes-backend-kit/bench/v2"
RSS_FLOOR_MIB = 1.0
BASELINE = "local"


@dataclass(frozen=True)
class Spec:
    key: str
    label: str
    unit: str
    better: str  # "lower" or "higher"
    floor: float = 0.0  # the ratio's denominator is at least this


class Sizes(TypedDict):
    """The workload the figures' labels name: stream and stdin in bytes, sync as (small files, bytes
    each, big file bytes)."""

    stream: int
    stdin: int
    sync: tuple[int, int, int]


def specs(sizes: Sizes) -> list[Spec]:
    out, stdin, sync = human_size(sizes["stream"]), human_size(sizes["stdin"]), sizes["sync"]
    return [
        Spec("cold_start_ms", "cold start: create to first result", "ms", "lower"),
        Spec("rtt_p50_ms", "warm round trip of `true`, p50", "ms", "lower"),
        Spec("rtt_p95_ms", "warm round trip of `true`, p95", "ms", "lower"),
        Spec("output_bounded_mib_s", f"output {out}, bounded capture", "MiB/s", "higher"),
        Spec("output_full_mib_s", f"output {out}, full capture", "MiB/s", "higher"),
        Spec("rss_bounded_mib", f"peak RSS growth, output {out} bounded", "MiB", "lower", RSS_FLOOR_MIB),
        Spec("rss_full_mib", f"peak RSS growth, output {out} full", "MiB", "lower", RSS_FLOOR_MIB),
        Spec("stdin_mib_s", f"stdin {stdin} through `wc -c`", "MiB/s", "higher"),
        Spec("sync_push_s", f"file sync push: {sync[0]} small files + {human_size(sync[2])}", "s", "lower"),
        Spec("sync_back_s", "file sync back on cleanup (with release)", "s", "lower"),
        Spec("suite_s", "certify wall time (the Suite section has its CPU)", "s", "lower"),
    ]


@dataclass
class Figure:
    value: float | None = None
    na: str | None = None  # why there is no value
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class TargetResult:
    name: str
    label: str
    figures: dict[str, Figure] = field(default_factory=dict)
    growth: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


def ratio(spec: Spec, value: float | None, base: float | None) -> float | None:
    if value is None or base is None:
        return None
    denominator = max(base, spec.floor)
    return round_figure(max(value, spec.floor) / denominator) if denominator > 0 else None


def to_json(results: list[TargetResult], sizes: Sizes, options: dict[str, Any]) -> dict[str, Any]:
    spec_list = specs(sizes)
    base = next(r for r in results if r.name == BASELINE)
    targets = {}
    for r in results:
        figures = {}
        for s in spec_list:
            f = r.figures.get(s.key, Figure(na="not measured"))
            b = base.figures.get(s.key, Figure())
            entry: dict[str, Any] = {
                "value": round_figure(f.value),
                "unit": s.unit,
                "better": s.better,
                "ratio": ratio(s, f.value, b.value),
            }
            if f.na:
                entry["na"] = f.na
            if entry["ratio"] is None and f.value is not None:
                entry["ratio_na"] = b.na or "the baseline has no value"
            if f.detail:
                entry["detail"] = f.detail
            figures[s.key] = entry
        targets[r.name] = {
            "label": r.label,
            "figures": figures,
            "growth": r.growth,
            **({"error": r.error} if r.error else {}),
        }
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": _cpus()},
        "baseline": BASELINE,
        "ratio": "value / baseline value (RSS: both floored at 1 MiB)",
        "options": options,
        "figures": {s.key: {"label": s.label, "unit": s.unit, "better": s.better} for s in spec_list},
        "targets": targets,
    }


def to_markdown(data: dict[str, Any]) -> str:
    names = list(data["targets"])
    labels = [data["targets"][n]["label"] for n in names]
    notes: list[str] = []
    load = data["machine"].get("load_average_1m")
    load_text = f", load average {load['start']:g} at the start and {load['end']:g} at the end" if load else ""
    lines = [
        f"Benchmark matrix ({data['created']}, Python {data['machine']['python']}, "
        f"{data['machine']['cpus']} CPUs{load_text}{', quick' if data['options'].get('quick') else ''}). "
        "Cells: value (ratio to local bash -c).",
        "",
        "| figure | " + " | ".join(labels) + " |",
        "| --- |" + " --- |" * len(names),
    ]
    for key, spec in data["figures"].items():
        cells = []
        for n in names:
            f = data["targets"][n]["figures"][key]
            if f["value"] is None:
                notes.append(f"{n}, {key}: {f.get('na', 'not measured')}")
                cells.append(f"n/a [{len(notes)}]")
                continue
            r = f"{f['ratio']:.2f}x" if f["ratio"] is not None else "-"
            cells.append(f"{_fmt(f['value'])} {spec['unit']} ({r})")
        lines.append(f"| {spec['label']} | " + " | ".join(cells) + " |")
    if notes:
        lines += ["", *[f"[{i}] {note}" for i, note in enumerate(notes, 1)]]
    lines += [
        "",
        *goals.markdown(data),
        *network.markdown(data),
        *suite.markdown(data),
        *world.markdown(data),
        *_growth_markdown(data),
    ]
    return "\n".join(lines) + "\n"


def _growth_markdown(data: dict[str, Any]) -> list[str]:
    lines = [
        "## Growth",
        "",
        "Slope: least squares on log-log (1 = linear, 0 = flat); tail = last three points. "
        "Departs: first point above 1.5x the linear extrapolation from the previous point "
        "(concurrency: n x one call's throughput above 1.5x the measured).",
        "",
        "| target | series | slope | tail slope | departs from linear at | ratio there |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    points: list[str] = []
    for name, t in data["targets"].items():
        for series, g in t["growth"].items():
            for what, fit in g.get("fits", {}).items():
                at = fit.get("departs_at")
                at_text = "-" if at is None else (human_size(int(at)) if series.startswith("output") else f"n={at}")
                lines.append(
                    f"| {name} | {series}: {what} | {_fmt(fit['slope'])} | "
                    f"{_fmt(fit.get('tail_slope'))} | {at_text} | {_fmt(fit.get('departure_ratio'))} |"
                )
            points.append(f"| {name} | {series} | " + "; ".join(_point_text(series, p) for p in g["points"]) + " |")
    lines += ["", "| target | series | points |", "| --- | --- | --- |", *points]
    return lines


def _point_text(series: str, p: dict[str, Any]) -> str:
    if series.startswith("output"):
        return f"{human_size(p['bytes'])}: {_fmt(p['latency_ms'])} ms, +{_fmt(p['rss_mib'])} MiB"
    return f"n={p['n']}: {_fmt(p['mib_s'])} MiB/s, p50 {_fmt(p['call_p50_ms'])} ms"


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def round_figure(v: float | None) -> float | None:
    return None if v is None else float(f"{v:.6g}")  # six significant digits at any magnitude


def _cpus() -> int | None:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
