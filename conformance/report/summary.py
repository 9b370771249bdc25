"""One line per backend report: the table `nox -s conformance` prints after running every default backend."""

from __future__ import annotations

from typing import Any

FIELDS = ("backend", "certified", "summary", "duration_s", "not_certified_because")  # what a line needs


def _counts(row: dict[str, int]) -> str:
    extra = [f"{row[k]} {k.replace('-', ' ')}" for k in ("unverified", "skipped", "not-run", "waived") if row.get(k)]
    return f"{row.get('pass', 0)}/{row.get('fail', 0)}" + (f" ({', '.join(extra)})" if extra else "")


def lines(reports: list[dict[str, Any]]) -> list[str]:
    """A fixed-width table: backend, verdict, profile, MUST and SHOULD pass/fail, run time."""
    rows = [("backend", "verdict", "profile", "MUST pass/fail", "SHOULD pass/fail", "time")]
    for report in reports:
        backend = report["backend"].get("name") or report["backend"]["spec"]
        verdict = "CERTIFIED" if report["certified"] else "NOT CERTIFIED"
        rows.append(
            (
                backend,
                verdict,
                report.get("profile") or "-",
                _counts(report["summary"]["must"]),
                _counts(report["summary"]["should"]),
                f"{report['duration_s']:.0f} s",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    for report in reports:
        if not report["certified"]:
            backend = report["backend"].get("name") or report["backend"]["spec"]
            out += [f"{backend}: {reason}" for reason in report["not_certified_because"]]
    certified = sum(1 for r in reports if r["certified"])
    out.append(f"{certified} of {len(reports)} backend(s) certified")
    return out
