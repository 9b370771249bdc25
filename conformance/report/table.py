"""The per-group summary table printed at the end of a run."""

from __future__ import annotations

from typing import Any

COLUMNS = ("pass", "fail", "not-applicable", "skipped")
HEAD = ("group", "pass", "fail", "n/a", "skipped", "MUST failed")


def render(report: dict[str, Any]) -> list[str]:
    groups: dict[str, dict[str, Any]] = {}
    for clause in report["clauses"]:
        row = groups.setdefault(clause["group"], {**dict.fromkeys(COLUMNS, 0), "must_failed": []})
        row[clause["verdict"]] += 1
        if clause["verdict"] == "fail" and clause["level"] == "MUST":
            row["must_failed"].append(clause["id"].split(".", 1)[1])
    rows = [HEAD]
    for group, row in groups.items():
        rows.append((group, *(str(row[c]) for c in COLUMNS), ", ".join(row["must_failed"]) or "-"))
    totals = {c: sum(r[c] for r in groups.values()) for c in COLUMNS}
    rows.append(("total", *(str(totals[c]) for c in COLUMNS), str(report["summary"]["must"]["fail"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD) - 1)]
    lines = []
    for i, r in enumerate(rows):
        cells = [r[0].ljust(widths[0]), *(r[k].rjust(widths[k]) for k in range(1, len(widths)))]
        lines.append("  ".join(cells) + "  " + r[-1])
        if i == 0 or i == len(rows) - 2:
            lines.append("-" * (sum(widths) + 2 * len(widths) + 11))
    backend = report["backend"]
    host = report["host"]
    verdict = "CERTIFIED" if report["certified"] else "NOT CERTIFIED"
    hermes = f" (hermes-agent {host['hermes_version']})" if host.get("hermes_version") else ""
    lines.append(
        f"{verdict}: backend {backend.get('name') or backend.get('spec')} on host {host.get('mode')}{hermes}; "
        f"MUST {report['summary']['must']['pass']} pass / {report['summary']['must']['fail']} fail, "
        f"SHOULD {report['summary']['should']['pass']} pass / {report['summary']['should']['fail']} fail, "
        f"{report['duration_s']}s"
    )
    return lines
