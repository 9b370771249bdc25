"""The one-line certificate every output shows: terminal table, report.md, badge, junit, verify."""

from __future__ import annotations

from typing import Any


def _needs(report: dict[str, Any], profile: str) -> list[tuple[str, int]]:
    """(stronger profile, how many unverified MUST clauses need it), for a run certified under ``profile``."""
    names = list(report["profiles"])
    stronger = names[:names.index(profile)]
    assigned: dict[str, str] = {}
    for name in reversed(stronger):  # the weakest profile that covers a clause is the one it needs
        for cid in report["profiles"][name]["unverified"]:
            assigned.setdefault(cid, name)
    return [(name, n) for name in stronger if (n := sum(1 for p in assigned.values() if p == name))]


def certificate(report: dict[str, Any]) -> tuple[str, str]:
    """("CERTIFIED" or "NOT CERTIFIED", what it covers)."""
    profile = report.get("profile")
    if report["certified"] and profile:
        row = report["profiles"][profile]
        applicable = row["must"] - row["not-applicable"]
        detail = f"{profile} profile: {row['pass']}/{applicable} MUST pass"
        if row["waived"]:
            detail += f", {row['waived']} waived"
        if row["not-applicable"]:
            detail += f", {row['not-applicable']} not applicable"
        needs = _needs(report, profile)
        if needs:
            detail += "; " + ", ".join(f"{n} MUST unverified, need the {name} profile" for name, n in needs)
        return "CERTIFIED", detail
    must = report["summary"]["must"]
    detail = (f"MUST {must['pass']} pass, {must['fail']} fail, {must['skipped']} skipped, "
              f"{must['unverified']} unverified, {must['not-applicable']} not applicable")
    return "NOT CERTIFIED", detail


def headline(report: dict[str, Any]) -> str:
    word, detail = certificate(report)
    return f"{word} ({detail})"
