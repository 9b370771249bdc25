"""Benchmark results (bench/results.json, docs/benchmarks.md) as inline SVG bar plots for report.html.

One plot per figure: a bar per backend.  A figure with ratios to the baseline
(local ``bash -c``) is drawn on a log scale around the baseline's 1, so a
backend 250 times slower and one at a tenth of the throughput both stay
readable; a bar is red when the backend does worse than the baseline on that
figure, green when it does as well or better.  A figure without any ratio (the
suite's wall time: the baseline runs no suite) is drawn as absolute values
from zero.  Every text is escaped; the SVG needs no script, font or network.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from conformance.errors import InputFileError

FIX = (
    "pass the results.json that `nox -s bench` (or `python -m conformance.bench --out PATH`) writes, "
    "or leave --bench out"
)
WIDTH, LABEL_W, PLOT_W, ROW_H, TOP = 720, 150, 380, 22, 8
WORSE, BETTER, NEUTRAL = "#c62828", "#2e7d32", "#546e7a"


class BenchFileError(InputFileError):
    """The --bench file cannot be read as benchmark results: the file, what is wrong and the fix."""

    fix = FIX


def load(path: str | Path) -> dict[str, Any]:
    """The benchmark results at ``path``, checked for the parts the plots read."""
    from conformance.bench.report import SCHEMA

    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BenchFileError(f"cannot read bench results {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BenchFileError(f"bench results {path} are not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise BenchFileError(f"{path} is not a benchmark results file (schema {found!r}, expected {SCHEMA!r})")
    problems = _shape_problems(data)
    if problems:
        raise BenchFileError(f"bench results {path} are malformed: {'; '.join(problems[:3])}")
    return data


def _shape_problems(data: dict[str, Any]) -> list[str]:
    figures, targets = data.get("figures"), data.get("targets")
    if not isinstance(figures, dict) or not figures:
        return ["no 'figures' object"]
    if not isinstance(targets, dict) or not targets:
        return ["no 'targets' object"]
    problems = []
    for name, target in targets.items():
        entries = target.get("figures") if isinstance(target, dict) else None
        if not isinstance(entries, dict):
            problems.append(f"targets.{name} has no 'figures' object")
            continue
        for key, entry in entries.items():
            if not isinstance(entry, dict):
                problems.append(f"targets.{name}.figures.{key} is not an object")
                continue
            for field in ("value", "ratio"):
                value = entry.get(field)
                if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                    problems.append(f"targets.{name}.figures.{key}.{field} is {value!r}, not a number or null")
    return problems


def _number(value: float) -> str:
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _rows(data: dict[str, Any], key: str) -> list[tuple[str, dict[str, Any]]]:
    """(backend label, figure entry) for every target except the baseline."""
    baseline = data.get("baseline")
    return [
        (str(t.get("label") or name), t["figures"].get(key) or {"value": None, "na": "not measured"})
        for name, t in data["targets"].items()
        if name != baseline
    ]


def plots(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(figure label, SVG markup) per figure of the results, in the results' order."""
    out = []
    for key, spec in data["figures"].items():
        rows = _rows(data, key)
        if not rows:
            continue
        label = str(spec.get("label") or key)
        better = spec.get("better", "lower")
        if any(entry.get("ratio") is not None for _, entry in rows):
            out.append((label, _ratio_svg(label, rows, better)))
        elif any(entry.get("value") is not None for _, entry in rows):
            out.append((label, _absolute_svg(label, rows, str(spec.get("unit") or ""))))
    return out


def _frame(label: str, rows: int, body: list[str]) -> str:
    height = TOP * 2 + ROW_H * rows + 18
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12" '
        f'aria-label="{html.escape(label.replace("`", ""))}">' + "".join(body) + "</svg>"
    )


def _row_label(i: int, name: str) -> str:
    y = TOP + ROW_H * i + ROW_H / 2 + 4
    return f'<text x="{LABEL_W - 8}" y="{y:.1f}" text-anchor="end">{html.escape(name)}</text>'


def _na(i: int, entry: dict[str, Any], x: float) -> str:
    why = entry.get("na") or entry.get("ratio_na") or "not measured"
    y = TOP + ROW_H * i + ROW_H / 2 + 4
    return f'<text x="{x:.1f}" y="{y:.1f}" fill="{NEUTRAL}" font-style="italic">n/a: {html.escape(str(why))}</text>'


def _ratio_svg(label: str, rows: list[tuple[str, dict[str, Any]]], better: str) -> str:
    ratios = [e["ratio"] for _, e in rows if e.get("ratio") is not None and e["ratio"] > 0]
    low = math.log10(min([*ratios, 1.0]) / 1.6)
    high = math.log10(max([*ratios, 1.0]) * 1.6)
    if high - low < 2:  # at least a factor 100 across, so small differences do not look huge
        pad = (2 - (high - low)) / 2
        low, high = low - pad, high + pad

    def x(ratio: float) -> float:
        return LABEL_W + (math.log10(ratio) - low) / (high - low) * PLOT_W

    base_x = x(1.0)
    bottom = TOP + ROW_H * len(rows)
    body = [
        f'<line x1="{base_x:.1f}" y1="{TOP - 4}" x2="{base_x:.1f}" y2="{bottom + 2}" stroke="#222" '
        f'stroke-dasharray="3 2"/>',
        f'<text x="{base_x:.1f}" y="{bottom + 14}" text-anchor="middle" fill="#222">1 = local bash -c</text>',
    ]
    for i, (name, entry) in enumerate(rows):
        body.append(_row_label(i, name))
        ratio = entry.get("ratio")
        if ratio is None or ratio <= 0:
            body.append(_na(i, entry, LABEL_W))
            continue
        worse = ratio > 1 if better == "lower" else ratio < 1
        left, right = sorted((base_x, x(ratio)))
        y = TOP + ROW_H * i + 4
        value = entry.get("value")
        text = f"{_number(ratio)}x" + (
            f" ({_number(value)} {entry.get('unit', '')})".rstrip() if value is not None else ""
        )
        body.append(
            f'<rect x="{left:.1f}" y="{y}" width="{max(right - left, 1.5):.1f}" height="{ROW_H - 8}" '
            f'fill="{WORSE if worse else BETTER}"><title>{html.escape(f"{name}: {text}")}</title></rect>'
        )
        body.append(f'<text x="{LABEL_W + PLOT_W + 8}" y="{y + ROW_H / 2:.1f}">{html.escape(text)}</text>')
    return _frame(label, len(rows), body)


def _absolute_svg(label: str, rows: list[tuple[str, dict[str, Any]]], unit: str) -> str:
    top = max(e["value"] for _, e in rows if e.get("value") is not None) or 1.0
    body = []
    for i, (name, entry) in enumerate(rows):
        body.append(_row_label(i, name))
        value = entry.get("value")
        if value is None:
            body.append(_na(i, entry, LABEL_W))
            continue
        y = TOP + ROW_H * i + 4
        text = f"{_number(value)} {unit}".rstrip()
        body.append(
            f'<rect x="{LABEL_W}" y="{y}" width="{max(value / top * PLOT_W, 1.5):.1f}" '
            f'height="{ROW_H - 8}" fill="{NEUTRAL}"><title>{html.escape(f"{name}: {text}")}</title></rect>'
        )
        body.append(f'<text x="{LABEL_W + PLOT_W + 8}" y="{y + ROW_H / 2:.1f}">{html.escape(text)}</text>')
    bottom = TOP + ROW_H * len(rows)
    body.append(
        f'<text x="{LABEL_W}" y="{bottom + 14}" fill="#222">absolute ({html.escape(unit)}): '
        "the baseline has no value to compare with</text>"
    )
    return _frame(label, len(rows), body)
