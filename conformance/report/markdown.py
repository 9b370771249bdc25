"""report.md: the human summary of a certification report."""

from __future__ import annotations

from typing import Any

from conformance.contract import Contract
from conformance.report.headline import certificate, hermes_release, undeclared_lines
from conformance.report.table import render as table_lines


def credentials_line(credentials: list[dict[str, str]]) -> str:
    """The run's credential variables by name and origin (a report never holds their values)."""
    return ", ".join(f"{c['name']} ({c['origin']})" for c in credentials) or "none"


def fake_world_line(world: dict[str, Any]) -> str:
    """How the fake's boxes ran: isolated (own namespaces) or as host processes (paths_note says why);
    for a backend whose sandboxes are this machine's by design (tempdir_box), just that."""
    if world.get("local"):
        return f"none (a local backend): {world['paths_note']}"
    if world["isolated"]:
        return f"isolated from this machine; {world['paths_note']}"
    return (
        "NOT isolated: box commands ran as local processes and could read this machine's processes and files, "
        f"so checks of what a sandbox can see may fail for the machine's sake; {world['paths_note']}"
    )


def render(report: dict[str, Any], contract: Contract) -> str:
    b, h = report["backend"], report["host"]
    word, detail = certificate(report)
    hermes = f" ({hermes_release(h)}{' from ' + h['where'] if h.get('where') else ''})" if hermes_release(h) else ""
    lines = [
        f"# Certification report: {b.get('name') or b['spec']}",
        "",
        f"**{word}** ({detail}) against contract version {report['contract']['version']} with "
        f"hermes-backend-kit {report['kit']['version']}.",
        "",
        f"- backend: `{b['spec']}` (provider `{b.get('name')}`, plugin `{b.get('plugin')}` {b.get('version') or ''})"
        + (f"; kind: {b['kind']}" if b.get("kind") else "")
        + (f" ({b['kind_source']})" if b.get("kind") and b.get("kind_source") not in (None, "default") else ""),
        f"- capabilities: {', '.join(b.get('capabilities') or []) or 'none'} (declared by {b.get('declared_by')}: "
        f"{', '.join(b.get('declared_capabilities') or []) or 'none'}; disclaimed: "
        f"{', '.join(b.get('disclaimed_capabilities') or []) or 'none'})",
        f"- host: {h.get('mode')}{hermes}; service: {'live' if report['live'] else 'fake ' + str(report['fake'])}",
        f"- run: {report['started_at']}, {report['duration_s']} s, complete: {'yes' if report['complete'] else 'no'}",
    ]
    if report.get("fake_world"):
        lines.append(f"- fake boxes: {fake_world_line(report['fake_world'])}")
    if report.get("credentials"):
        lines.append(f"- credentials: {credentials_line(report['credentials'])}")
    lines += [f"- {gap['note']}" for gap in h.get("gaps") or ()]
    if not report["certified"]:
        lines += ["", "Why not certified:", ""] + [f"- {r}" for r in report["not_certified_because"]]
    if report.get("undeclared"):
        lines += [
            "",
            "## Undeclared capabilities",
            "",
            "Optional capabilities the backend neither declares nor disclaims. One whose code shows signs "
            "of it is probed: its clauses run as if declared, and a MUST failure blocks certification. "
            "Declare what the backend offers and disclaim the rest.",
            "",
        ]
        lines += [f"- {line.removeprefix('undeclared capability ')}" for line in undeclared_lines(report)]
    lines += [
        "",
        "## Profiles",
        "",
        "A certificate names the strongest profile whose MUST clauses were all observed and pass. "
        "*Unverified* clauses are ones the kit could not observe on this run (no world view, no "
        "fault injection); they never count toward a certificate.",
        "",
        "| profile | MUST covered | pass | not applicable | waived | unverified | failing | met |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in report["profiles"].items():
        lines.append(
            f"| {name}{' (certified)' if name == report.get('profile') else ''} | {row['must']} | "
            f"{row['pass']} | {row['not-applicable']} | {row['waived']} | {len(row['unverified'])} | "
            f"{len(row['failing'])} | {'yes' if row['met'] else 'no'} |"
        )
    lines += ["", "## Verdicts per group", "", "```", *table_lines(report), "```"]
    proposals = [c for c in report["clauses"] if c["id"] in contract and contract.get(c["id"]).proposal]
    if proposals:
        lines += [
            "",
            "## Proposals",
            "",
            "Clauses resting on Hermes code no release the kit runs on has yet: SHOULD at most, checked only "
            "where the host has the feature (`contract show ID` says where each comes from).",
            "",
        ]
        lines += [f"- `{c['id']}` {c['level']} {c['verdict']}" for c in proposals]
        lines.append("")
    failures = [c for c in report["clauses"] if c["verdict"] == "fail"]
    if failures:
        lines += ["", "## Failures", ""]
        for c in failures:
            clause = contract.get(c["id"])
            lines += [
                f"### `{c['id']}` ({c['level']}{', waived' if 'waived' in c else ''})",
                "",
                f"{clause.statement}",
                "",
                f"- source: {clause.source}",
            ]
            if clause.fix:
                lines.append(f"- how to fix: {clause.fix}")
            for check in c["checks"]:
                if check["outcome"] == "failed":
                    excerpt = check.get("excerpt", "").replace("`", "'")
                    lines.append(f"- `{check['id']}`: {excerpt}")
            lines.append("")
    waived = [c for c in report["clauses"] if "waived" in c]
    if waived:
        lines += ["## Waived", ""]
        lines += [
            f"- `{c['id']}` {c['level']} {c['verdict']}: {c['waived']['reason']} ({c['waived']['issue']}, "
            f"until {c['waived']['expires']})"
            for c in waived
        ]
        lines.append("")
    unverified = [c for c in report["clauses"] if c["verdict"] == "unverified"]
    if unverified:
        lines += ["## Unverified: the kit could not observe these", ""]
        lines += [f"- `{c['id']}` {c['level']}: {c.get('reason', '')}" for c in unverified]
        lines.append("")
    skipped = [c for c in report["clauses"] if c["verdict"] in ("skipped", "not-applicable", "not-run")]
    if skipped:
        lines += ["## Not applicable, skipped or not run", ""]
        lines += [f"- `{c['id']}` {c['verdict']}: {c.get('reason', '')}" for c in skipped]
    return "\n".join(lines).rstrip() + "\n"


def badge(report: dict[str, Any]) -> dict[str, Any]:
    """A shields.io endpoint badge naming the certificate's profile."""
    profile = report.get("profile")
    if report.get("selection"):
        return {"schemaVersion": 1, "label": "hermes backend", "message": "diagnostic run", "color": "lightgrey"}
    if report["certified"] and profile:
        row = report["profiles"][profile]
        message = f"certified, {profile} ({row['pass']}/{row['must'] - row['not-applicable']} MUST"
        # Only the first (strongest) profile is bright green: a weaker certificate looks weaker.
        color = "brightgreen" if profile == next(iter(report["profiles"])) else "green"
    else:
        must = report["summary"]["must"]
        message, color = f"not certified ({must['pass']}/{must['pass'] + must['fail'] + must['skipped']} MUST", "red"
    names = [e["capability"] for e in report.get("undeclared") or []]
    message += f"; undeclared: {', '.join(names)})" if names else ")"
    return {"schemaVersion": 1, "label": "hermes backend", "message": message, "color": color}
