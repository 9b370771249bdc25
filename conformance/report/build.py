"""Assemble the JSON certification report of a run."""

from __future__ import annotations

import datetime as dt
import platform
from typing import Any

from conformance import __version__
from conformance.contract import Contract
from conformance.verdicts import ClauseVerdict, summarize

REPORT_FORMAT = 1


def build(contract: Contract, verdicts: list[ClauseVerdict], context: dict[str, Any], *,
          duration_s: float, started_at: float, spec: str, host_requested: str) -> dict[str, Any]:
    summary = summarize(verdicts)
    backend = dict(context.get("backend") or {"spec": spec, "name": None})
    host = dict(context.get("host") or {"mode": None, "requested": host_requested})
    return {
        "format": REPORT_FORMAT,
        "kit": {"name": "hermes-backend-kit", "version": __version__},
        "contract": {"version": contract.version, "sha256": contract.sha256, "clauses": len(contract)},
        "backend": backend,
        "host": host,
        "fake": context.get("fake"),
        "live": context.get("live", False),
        "clauses": [
            {"id": v.id, "level": v.level, "group": v.group, "verdict": v.verdict,
             **({"reason": v.reason} if v.reason else {}), "checks": v.checks, "duration_s": v.duration_s}
            for v in verdicts
        ],
        "summary": summary,
        # No MUST failed, and none was skipped: a skip could hide a regression.
        "certified": bool(context) and summary["must"]["fail"] == 0 and summary["must"]["skipped"] == 0,
        "started_at": dt.datetime.fromtimestamp(started_at, dt.UTC).isoformat(timespec="seconds"),
        "duration_s": round(duration_s, 2),
        "environment": {"python": platform.python_version(), "platform": platform.platform()},
    }
