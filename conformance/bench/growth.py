"""How a figure grows: a log-log slope and the first point where growth stops being linear.

Slope: ordinary least squares of log(y) on log(x) over all points, and over
the last three (the tail, where a fixed per-call overhead no longer hides
the per-byte cost).  1 means y grows linearly with x, 0 means flat, 2
quadratic.

Departure from linear, for a cost (latency, memory) against size: point i
departs when y[i] exceeds 1.5x the proportional extrapolation from the
previous point, y[i-1] * x[i]/x[i-1].  A cost a + b*x with a, b >= 0 never
exceeds that extrapolation, so exceeding it by half is superlinear growth,
not overhead.  Values under a noise floor are raised to it first (a few
hundred KiB of RSS is page-granularity noise).

For throughput against concurrency, linear is perfect scaling, n * y[0];
point n departs when that extrapolation exceeds the measured value by 1.5x.
"""

from __future__ import annotations

import math
from typing import Any

DEPARTURE_FACTOR = 1.5


def loglog_slope(xs: list[float], ys: list[float], floor: float = 1e-9) -> float | None:
    pts = [(math.log(x), math.log(max(y, floor))) for x, y in zip(xs, ys, strict=True) if x > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def cost_growth(xs: list[float], ys: list[float], *, floor: float = 0.0) -> dict[str, Any]:
    """Slope and departure of a cost (higher is worse) measured at increasing x."""
    floored = [max(y, floor) for y in ys]
    departs_at, ratio_there, worst = None, None, 0.0
    for i in range(1, len(xs)):
        linear = floored[i - 1] * xs[i] / xs[i - 1]
        ratio = floored[i] / linear if linear > 0 else 0.0
        worst = max(worst, ratio)
        if departs_at is None and ratio > DEPARTURE_FACTOR:
            departs_at, ratio_there = xs[i], ratio
    return {
        "fit": "least squares on log-log",
        "slope": _round(loglog_slope(xs, floored, floor or 1e-9)),
        "tail_slope": _round(loglog_slope(xs[-3:], floored[-3:], floor or 1e-9)),
        "departs_at": departs_at,
        "departure_ratio": _round(ratio_there),
        "max_ratio_to_linear": _round(worst),
        "rule": f"y[i] > {DEPARTURE_FACTOR} * y[i-1] * x[i]/x[i-1]" + (f" (y floored at {floor})" if floor else ""),
    }


def scaling_growth(ns: list[int], throughputs: list[float]) -> dict[str, Any]:
    """Slope and departure of throughput against the number of concurrent calls."""
    departs_at, ratio_there, worst = None, None, 0.0
    base = throughputs[0] / ns[0] if ns and ns[0] else 0.0
    for n, y in zip(ns, throughputs, strict=True):
        linear = base * n
        ratio = linear / y if y > 0 else math.inf
        worst = max(worst, ratio)
        if departs_at is None and ratio > DEPARTURE_FACTOR:
            departs_at, ratio_there = n, ratio
    return {
        "fit": "least squares on log-log",
        "slope": _round(loglog_slope([float(n) for n in ns], throughputs)),
        "departs_at": departs_at,
        "departure_ratio": _round(ratio_there),
        "max_ratio_to_linear": _round(worst),
        "rule": f"n * throughput[1 call] > {DEPARTURE_FACTOR} * throughput[n]",
    }


def _round(v: float | None) -> float | None:
    return None if v is None or math.isinf(v) else round(v, 3)
