"""A simulated complete run: every check of the shipped manifest, gated exactly as the plugin gates it.

Lets the profile, certificate and verify rules be tested on whole reports
without running a suite (the suite-marked tests in test_certification.py do
that for real runs).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from conformance import contract, manifest, verdicts
from conformance.report import build
from conformance.verdicts import CheckOutcome

CONTRACT = contract.load()
# A sandbox backend (per-task-sandbox is its kind) that declares every optional capability.
DECLARED = frozenset({"persistence", "stdin-stream", "file-sync", "session-isolation", "per-task-sandbox"})
WORLD = frozenset({"world", "world-states"})


def must_needing(*capabilities: str) -> set[str]:
    return {c.id for c in CONTRACT if c.level == "MUST" and set(capabilities) & set(c.capabilities)}


def run(
    present: Collection[str],
    *,
    fail: Collection[str] = (),
    waivers: list[Any] = (),
    undeclared: dict[str, list[str]] | None = None,
    disclaimed: Collection[str] = (),
) -> dict[str, Any]:
    """The report of a complete run with capabilities ``present`` whose checks of ``fail`` fail.

    ``undeclared``: the declarable capabilities neither declared nor disclaimed, with their signs
    (a probed one, with signs, must be in ``present`` too); the other declarable capabilities in
    ``present`` are declared, the rest ``disclaimed`` (default: none, so undeclared without signs).
    """
    shipped = manifest.shipped()
    declarable = {n for n, c in CONTRACT.capabilities.items() if c["determined_by"] == "declared"}
    undeclared = dict(undeclared or {})
    for name in declarable - set(present) - set(disclaimed):
        undeclared.setdefault(name, [])
    declared = (set(present) & declarable) - set(undeclared)
    outcomes = []
    for check, clauses in shipped["cites"].items():
        black_box = shipped["black_box"].get(check)
        outcome = CheckOutcome(f"conformance/checks/{check}", tuple(clauses), black_box=black_box is not None)
        outcome.absorb("setup", "passed", "", 0.01)
        gate = verdicts.gate_reason(CONTRACT, clauses, present, black_box)
        if gate:
            outcome.absorb("setup", "skipped", gate, 0.0)
        elif set(clauses) & set(fail):
            outcome.absorb("call", "failed", "AssertionError: the backend broke it", 0.1)
        else:
            outcome.absorb("call", "passed", "", 0.1)
        outcomes.append(outcome)
    context = {
        "backend": {
            "spec": "sim",
            "name": "sim",
            "capabilities": sorted(present),
            "declared_capabilities": sorted(declared),
            "disclaimed_capabilities": sorted(disclaimed),
            "undeclared_capabilities": undeclared,
        },
        "host": {"mode": "builtin", "requested": "auto", "features": dict.fromkeys(CONTRACT.host_features, True)},
        "fake": "tempdir" if "world" in present else None,
        "live": False,
    }
    return build.build(
        CONTRACT,
        outcomes,
        context,
        duration_s=1.0,
        started_at=time.time(),
        spec="sim",
        host_requested="auto",
        waivers=list(waivers),
        complete=True,
        checks_sha256=shipped["checks_sha256"],
    )


def rederive(report: dict[str, Any]) -> dict[str, Any]:
    """What a forger does after editing verdicts: recompute every derived field with the kit's own functions."""
    report["summary"] = verdicts.summarize(report["clauses"])
    report["profiles"] = verdicts.profiles(CONTRACT, report["clauses"])
    report["undeclared"] = verdicts.undeclared(CONTRACT, report["clauses"], report["backend"])
    report["certified"], report["profile"], report["not_certified_because"] = verdicts.certification(report)
    return report
