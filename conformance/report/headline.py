"""The one-line certificate every output shows (terminal table, report.md, badge, junit, verify),
and the lines on undeclared capabilities each of them shows with it."""

from __future__ import annotations

from typing import Any


def _needs(report: dict[str, Any], profile: str) -> list[tuple[str, int]]:
    """(stronger profile, how many unverified MUST clauses need it), for a run certified under ``profile``."""
    names = list(report["profiles"])
    stronger = names[: names.index(profile)]
    assigned: dict[str, str] = {}
    for name in reversed(stronger):  # the weakest profile that covers a clause is the one it needs
        for cid in report["profiles"][name]["unverified"]:
            assigned.setdefault(cid, name)
    return [(name, n) for name in stronger if (n := sum(1 for p in assigned.values() if p == name))]


def _probe_state(entry: dict[str, Any]) -> str:
    if entry["probe"] == "not run":
        return "no signs"
    if entry["probe"] == "failed":
        must = len(entry.get("must_failed", []))
        return f"probe failed {must} MUST" if must else f"probe failed {len(entry.get('failed', []))} SHOULD/MAY"
    return f"probe {entry['probe']}"


def undeclared_note(report: dict[str, Any]) -> str:
    """'undeclared: persistence (probe failed 1 MUST), file-sync (no signs)', or '' when every
    declarable capability was declared or disclaimed."""
    entries = report.get("undeclared") or []
    if not entries:
        return ""
    return "undeclared: " + ", ".join(f"{e['capability']} ({_probe_state(e)})" for e in entries)


def undeclared_lines(report: dict[str, Any]) -> list[str]:
    """One line per undeclared capability: the signs found and what the probe of its clauses gave."""
    lines = []
    for e in report.get("undeclared") or []:
        if e["probe"] == "not run":
            lines.append(
                f"undeclared capability {e['capability']}: no signs of support found; its "
                f"{len(e['clauses'])} clause(s) are not applicable (declare or disclaim it to say so)"
            )
            continue
        line = f"undeclared capability {e['capability']} (signs: {'; '.join(e['signs'])}): "
        if e["probe"] == "failed":
            line += (
                f"probe failed {len(e['failed'])} clause(s) ({', '.join(e['failed'])}), "
                f"{len(e['must_failed'])} of them MUST; declare {e['capability']} and fix them, or disclaim it"
            )
        else:
            line += f"probe {e['probe']}: {len(e['passed'])} of {len(e['clauses'])} clause(s) pass"
        lines.append(line)
    return lines


def _must_tally(report: dict[str, Any]) -> str:
    must = report["summary"]["must"]
    tally = (
        f"MUST {must['pass']} pass, {must['fail']} fail, {must['skipped']} skipped, "
        f"{must['unverified']} unverified, {must['not-applicable']} not applicable"
    )
    if must.get("not-run"):
        tally += f", {must['not-run']} not run"
    return tally


def certificate(report: dict[str, Any]) -> tuple[str, str]:
    """("CERTIFIED", "NOT CERTIFIED" or "DIAGNOSTIC" (a narrowed run, never certified), what it covers)."""
    if report.get("selection"):
        return "DIAGNOSTIC", f"{report['selection']}: {_must_tally(report)}; a narrowed run is never certified"
    profile = report.get("profile")
    if report["certified"] and profile:
        row = report["profiles"][profile]
        applicable = row["must"] - row["not-applicable"]
        detail = f"{profile} profile: {row['pass']}/{applicable} MUST clauses pass"
        if row["waived"]:
            detail += f", {row['waived']} waived"
        if row["not-applicable"]:
            detail += f", {row['not-applicable']} not applicable"
        needs = _needs(report, profile)
        if needs:
            detail += "; " + ", ".join(f"{n} MUST unverified, need the {name} profile" for name, n in needs)
    else:
        detail = _must_tally(report)
    note = undeclared_note(report)
    if note:
        detail += f"; {note}"
    kind = report["backend"].get("kind")
    if kind:  # reports made before the contract named backend kinds have none
        detail += f"; {kind} backend"
    return ("CERTIFIED" if report["certified"] and profile else "NOT CERTIFIED"), detail


def headline(report: dict[str, Any]) -> str:
    word, detail = certificate(report)
    return f"{word} ({detail})"


def must_failure_lines(report: dict[str, Any], reason_chars: int = 300) -> list[str]:
    """'MUST fail exec.exit-code: <reason>' for every failing MUST clause, each on one line (the
    reason's whitespace folded, cut at ``reason_chars``); every such clause, never a sample."""
    lines = []
    for clause in report["clauses"]:
        if clause["verdict"] == "fail" and clause["level"] == "MUST":
            reason = " ".join(str(clause.get("reason") or "no reason recorded").split())
            if len(reason) > reason_chars:
                reason = reason[: reason_chars - 3] + "..."
            lines.append(f"MUST fail {clause['id']}: {reason}")
    return lines


def hermes_release(host: dict[str, Any]) -> str:
    """The installed Hermes a report ran on, as "hermes-agent 0.19.0" (its distribution's own name), or ""."""
    version = host.get("hermes_version")
    return f"{host.get('distribution') or 'hermes-agent'} {version}" if version else ""
