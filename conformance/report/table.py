"""The per-group summary table printed at the end of a run."""

from __future__ import annotations

from typing import Any

from conformance.report.headline import certificate, hermes_release, undeclared_lines

COLUMNS = ("pass", "fail", "not-applicable", "unverified", "skipped")
LABELS = {"not-applicable": "n/a", "not-run": "not run"}


def columns(report: dict[str, Any]) -> tuple[str, ...]:
    """The verdict columns of ``report``'s tables: COLUMNS, and ``not-run`` in a run that left clauses out."""
    return COLUMNS + (("not-run",) if any(c["verdict"] == "not-run" for c in report["clauses"]) else ())


def group_counts(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per group, in report order: how many clauses have each verdict, and the MUST clauses that failed
    (without the group prefix)."""
    groups: dict[str, dict[str, Any]] = {}
    shown = columns(report)
    for clause in report["clauses"]:
        row = groups.setdefault(clause["group"], {**dict.fromkeys(shown, 0), "must_failed": []})
        row[clause["verdict"]] += 1
        if clause["verdict"] == "fail" and clause["level"] == "MUST":
            row["must_failed"].append(clause["id"].split(".", 1)[1])
    return groups


def profile_state(row: dict[str, Any]) -> str:
    """Why a profile is not met: its failing, not run and unverified MUST clauses, each counted once."""
    parts = [
        f"{len(row[key])} MUST {word}"
        for key, word in (("failing", "failing"), ("not-run", "not run"), ("unverified", "unverified"))
        if row.get(key)
    ]
    return ", ".join(parts) or "not met"


def render(report: dict[str, Any]) -> list[str]:
    groups = group_counts(report)
    shown = columns(report)
    head = ("group", *(LABELS.get(c, c) for c in shown), "MUST failed")
    rows: list[tuple[str, ...]] = [head]
    for group, row in groups.items():
        rows.append((group, *(str(row[c]) for c in shown), ", ".join(row["must_failed"]) or "-"))
    totals = {c: sum(r[c] for r in groups.values()) for c in shown}
    rows.append(("total", *(str(totals[c]) for c in shown), str(report["summary"]["must"]["fail"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    lines = []
    for i, r in enumerate(rows):
        cells = [r[0].ljust(widths[0]), *(r[k].rjust(widths[k]) for k in range(1, len(widths)))]
        lines.append("  ".join(cells) + "  " + r[-1])
        if i == 0 or i == len(rows) - 2:
            lines.append("-" * (sum(widths) + 2 * len(widths) + 11))
    for name, row in report["profiles"].items():
        state = "met" if row["met"] else profile_state(row)
        lines.append(
            f"profile {name}: {row['pass']}/{row['must'] - row['not-applicable']} MUST clauses pass, "
            f"{row['not-applicable']} not applicable, {row['waived']} waived: {state}"
        )
    lines += undeclared_lines(report)
    backend = report["backend"]
    host = report["host"]
    if host.get("note"):
        lines.append(f"host: {host['note']}")
    word, detail = certificate(report)
    hermes = f" ({hermes_release(host)})" if hermes_release(host) else ""
    should = report["summary"]["should"]
    lines.append(
        f"{word}: backend {backend.get('name') or backend.get('spec')} on host {host.get('mode')}{hermes}; "
        f"{detail}; SHOULD {should['pass']} pass / {should['fail']} fail, {report['duration_s']}s"
    )
    return lines
