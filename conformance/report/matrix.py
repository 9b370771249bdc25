"""The fault matrix: one row per scripted fault, one column per backend's report.

Rows are the faults the kit scripts through a fake, each judged by one
contract clause.  Most are in the faults group; a sandbox paused, deleted or
broken behind the backend's back is judged by the persist clauses, which
already state the required outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conformance.report import files

FAULTS: tuple[tuple[str, str], ...] = (
    ("connection dropped mid-command", "faults.dropped-mid-command"),
    ("429 on create", "faults.create-rate-limited"),
    ("5xx on an idempotent read", "faults.read-5xx-retried"),
    ("5xx on a command call", "faults.exec-5xx-not-retried"),
    ("server silent", "faults.silent-server"),
    ("server silent during garbage collection", "faults.silent-finalizer"),
    ("box paused behind the client's back", "persist.paused-resumed"),
    ("box deleted behind the client's back", "persist.deleted-replaced"),
    ("box in the error state", "persist.error-reported"),
    ("box deleted mid-command", "faults.vanished-mid-command"),
    ("half-closed socket", "faults.half-closed"),
    ("garbage or truncated frame", "faults.damaged-frame"),
    ("output flood", "faults.output-flood"),
)
SHOWN = {
    "pass": "pass",
    "fail": "**FAIL**",
    "not-applicable": "n/a",
    "unverified": "unverified",
    "skipped": "skipped",
    "not-run": "not run",
    "error": "**ERROR**",
}


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """The reports at ``paths``; ReportFileError naming the first that cannot be read or is not a report."""
    return [files.read_report(path, versioned=False) for path in paths]


def column(report: dict[str, Any]) -> str:
    backend = report.get("backend") or {}
    return str(backend.get("name") or backend.get("spec") or "?")


def rows(reports: list[dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """(fault, clause, verdict per report); a clause a report does not hold is "absent"."""
    verdicts = [{c["id"]: c["verdict"] for c in r.get("clauses", [])} for r in reports]
    return [(fault, clause, [v.get(clause, "absent") for v in verdicts]) for fault, clause in FAULTS]


def markdown(reports: list[dict[str, Any]]) -> str:
    names = [column(r) for r in reports]
    lines = [
        "| fault | clause | " + " | ".join(names) + " |",
        "| --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for fault, clause, cells in rows(reports):
        lines.append(f"| {fault} | `{clause}` | " + " | ".join(SHOWN.get(c, c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def failing(reports: list[dict[str, Any]]) -> list[str]:
    """Cells that fail or error, as "backend: clause"."""
    names = [column(r) for r in reports]
    return [
        f"{names[i]}: {clause}"
        for _, clause, cells in rows(reports)
        for i, cell in enumerate(cells)
        if cell in ("fail", "error")
    ]
