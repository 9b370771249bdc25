"""The benchmark matrix: every backend on its fake beside plain local ``bash -c``.

    python -m conformance.bench [--quick] [--backends a,b] [--skip-suite] [--out bench/results.json]

Modules: ``measure`` (timers, RSS high-water mark), ``targets`` (the
baseline and a backend behind one interface), ``growth`` (slopes and where
growth stops being linear), ``report`` (ratios, JSON, Markdown), ``cli``.
Docs: docs/benchmarks.md.
"""
