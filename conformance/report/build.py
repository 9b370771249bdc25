"""Assemble the certification report (format 1) of a run, and decide certification.

A backend is certified when the run is complete (every check of this kit
version ran, unedited), no waiver is in error, and every MUST clause that
failed or was skipped is waived.  ``certification`` recomputes that from a
report alone, so ``verify`` can check a report offline.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
from collections.abc import Iterable
from typing import Any

from conformance import __version__
from conformance.contract import Contract
from conformance.manifest import check_key
from conformance.verdicts import VERDICTS, CheckOutcome, aggregate
from conformance.waivers import Waiver, apply

REPORT_FORMAT = 1
EXCERPT_CHARS = 600


def fingerprint() -> dict[str, Any]:
    """Where the run happened, without anything identifying a person."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def certification(report: dict[str, Any]) -> tuple[bool, list[str]]:
    """(certified, why not) from a report's own fields."""
    reasons = []
    if not report.get("backend", {}).get("name"):
        reasons.append("no check reached the backend")
    if not report.get("complete"):
        reasons.append("the run is not complete")
    reasons += [f"waiver error: {e}" for e in report.get("errors", [])]
    for clause in report.get("clauses", []):
        if clause["level"] == "MUST" and clause["verdict"] in ("fail", "skipped") and "waived" not in clause:
            reasons.append(f"MUST clause {clause['id']} {'failed' if clause['verdict'] == 'fail' else 'was skipped'}")
    return not reasons, reasons


def summarize(clauses: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    summary = {level: {**dict.fromkeys(VERDICTS, 0), "waived": 0} for level in ("must", "should", "may")}
    for c in clauses:
        row = summary[c["level"].lower()]
        row[c["verdict"]] += 1
        row["waived"] += "waived" in c
    return summary


def build(contract: Contract, outcomes: Iterable[CheckOutcome], context: dict[str, Any], *,
          duration_s: float, started_at: float, spec: str, host_requested: str,
          waivers: list[Waiver] = (), complete: bool = False, incomplete: list[str] = (),
          checks_sha256: str = "") -> dict[str, Any]:
    outcomes = list(outcomes)
    by_clause: dict[str, list[CheckOutcome]] = {}
    for outcome in outcomes:
        for cid in outcome.clauses:
            by_clause.setdefault(cid, []).append(outcome)
    clauses = []
    for v in aggregate(contract, outcomes):
        evidence = [
            {"id": check_key(o.nodeid), "outcome": o.outcome, "duration_s": round(o.duration_s, 3),
             **({"excerpt": o.reason[:EXCERPT_CHARS]} if o.outcome != "passed" and o.reason else {})}
            for o in sorted(by_clause.get(v.id, []), key=lambda o: o.nodeid)
        ]
        clauses.append({"id": v.id, "level": v.level, "group": v.group, "verdict": v.verdict,
                        **({"reason": v.reason} if v.reason else {}), "checks": evidence,
                        "duration_s": v.duration_s})
    errors = apply(clauses, list(waivers))
    backend = dict(context.get("backend") or {"spec": spec, "name": None})
    host = dict(context.get("host") or {"mode": None, "requested": host_requested})
    report: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "kit": {"name": "hermes-backend-kit", "version": __version__, "checks_sha256": checks_sha256},
        "contract": {"version": contract.version, "sha256": contract.sha256, "clauses": len(contract)},
        "backend": backend,
        "host": host,
        "fake": context.get("fake"),
        "live": context.get("live", False),
        "waivers": [w.to_dict() for w in waivers],
        "errors": errors,
        "complete": complete,
        "incomplete_reasons": list(incomplete),
        "clauses": clauses,
        "summary": summarize(clauses),
        "started_at": dt.datetime.fromtimestamp(started_at, dt.UTC).isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 2),
        "environment": fingerprint(),
    }
    report["certified"], report["not_certified_because"] = certification(report)
    return report
