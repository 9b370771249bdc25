"""The benchmark matrix: every backend on its fake beside plain local ``bash -c``.

    python -m conformance.bench [--quick] [--backends a,b] [--skip-suite] [--out bench/results.json]
    hermes-backend-kit bench --backend SPEC [--reference NAME] [--quick] ...

Modules: ``measure`` (timers, RSS high-water mark), ``targets`` (the
baseline and a backend behind one interface), ``growth`` (slopes and where
growth stops being linear), ``report`` (ratios, JSON, Markdown), ``entries``
(which backends a run measures), ``options`` and ``command`` (the command
line), ``cli``.
Docs: docs/benchmarks.md.
"""
