"""Assemble the certification report (format 2) of a run, and decide certification.

A backend is certified when the run is complete (every check of this kit
version ran, unedited), no waiver is in error, every MUST clause that failed
or was skipped is waived (those of probed, undeclared capabilities too), and
a certification profile is met; the report names that profile and lists the
capabilities the backend neither declared nor disclaimed, with the signs
found and each probe's outcome.  Every derived field (verdicts, summary, profiles,
certificate) comes from conformance.verdicts, which ``verify`` uses too.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
from collections.abc import Iterable, Sequence
from typing import Any

from conformance import __version__, verdicts
from conformance.contract import Contract
from conformance.manifest import check_key
from conformance.verdicts import CheckOutcome, aggregate
from conformance.waivers import Waiver, apply

REPORT_FORMAT = 2
EXCERPT_CHARS = 600
ELIDED = " … "
# Control characters but newline and tab: a raw NUL makes tools take report.md for binary.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def clip(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` with control characters shown as ``\\xNN`` and, past ``limit`` characters, its start and
    its end kept (a traceback's last line names the error; a verdict's prefix opens the text)."""
    text = _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)
    if len(text) <= limit:
        return text
    head = limit * 2 // 5
    return text[:head] + ELIDED + text[-(limit - head - len(ELIDED)) :]


def fingerprint() -> dict[str, Any]:
    """Where the run happened, without anything identifying a person."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }


def build(
    contract: Contract,
    outcomes: Iterable[CheckOutcome],
    context: dict[str, Any],
    *,
    duration_s: float,
    started_at: float,
    spec: str,
    host_requested: str,
    waivers: Sequence[Waiver] = (),
    complete: bool = False,
    incomplete: Sequence[str] = (),
    checks_sha256: str = "",
    selection: str | None = None,
) -> dict[str, Any]:
    outcomes = list(outcomes)
    by_clause: dict[str, list[CheckOutcome]] = {}
    for outcome in outcomes:
        for cid in outcome.clauses:
            by_clause.setdefault(cid, []).append(outcome)
    clauses = []
    for v in aggregate(contract, outcomes):
        evidence = [
            {
                "id": check_key(o.nodeid),
                "outcome": o.outcome,
                "duration_s": round(o.duration_s, 3),
                **({"black_box": True} if o.black_box else {}),
                **({"excerpt": clip(o.reason)} if o.outcome != "passed" and o.reason else {}),
            }
            for o in sorted(by_clause.get(v.id, []), key=lambda o: o.nodeid)
        ]
        clauses.append(
            {
                "id": v.id,
                "level": v.level,
                "group": v.group,
                "verdict": v.verdict,
                **({"reason": v.reason} if v.reason else {}),
                "checks": evidence,
                "duration_s": v.duration_s,
            }
        )
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
        **({"fake_world": context["fake_world"]} if context.get("fake_world") else {}),
        "live": context.get("live", False),
        "credentials": list(context.get("credentials") or []),
        **({"selection": selection} if selection else {}),
        "waivers": [w.to_dict() for w in waivers],
        "errors": errors,
        "complete": complete,
        "incomplete_reasons": list(incomplete),
        "clauses": clauses,
        "summary": verdicts.summarize(clauses),
        "profiles": verdicts.profiles(contract, clauses),
        "undeclared": verdicts.undeclared(contract, clauses, backend),
        "started_at": dt.datetime.fromtimestamp(started_at, dt.UTC).isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 2),
        "environment": fingerprint(),
    }
    report["certified"], report["profile"], report["not_certified_because"] = verdicts.certification(report)
    return report
