"""report.html: one self-contained page of a certification report, for a browser or a CI artifact.

The page holds the same facts as report.md, from the same helpers (the
certificate line, the per-group counts, the undeclared-capability lines, the
fake-world line, the fault matrix rows), laid out for reading: the verdict
first, failing MUST clauses before anything else, one expandable section per
clause group (open when the group has a failure) with every clause's checks
and their evidence, the fault matrix, optional benchmark plots and the run's
environment.  Everything is inline (CSS, SVG); a Content-Security-Policy meta
tag forbids the page any request, script or outside resource, so it renders
the same offline and leaks nothing when opened.  Every text is redacted with
the kit's redactor and HTML-escaped.
"""

from __future__ import annotations

import html
import re
from typing import Any

from conformance import redact
from conformance.contract import Clause, Contract
from conformance.report import matrix
from conformance.report.headline import certificate, hermes_release, undeclared_lines
from conformance.report.markdown import credentials_line, fake_world_line
from conformance.report.table import LABELS, columns, group_counts

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
FIELDS = (
    "backend",
    "host",
    "kit",
    "contract",
    "clauses",
    "summary",
    "profiles",
    "certified",
    "started_at",
    "duration_s",
    "complete",
)
REASONS_SHOWN = 8
VERDICT_ORDER = ("fail", "error", "skipped", "not-run", "unverified", "not-applicable", "pass")
STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1b1f23; margin: 0;
       background: #f6f7f9; }
main { max-width: 1100px; margin: 0 auto; padding: 24px; }
h1 { font-size: 22px; margin: 0 0 12px; }
h2 { font-size: 18px; margin: 28px 0 10px; border-bottom: 1px solid #d0d7de; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 16px 0 6px; }
code, pre { font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre { white-space: pre-wrap; word-break: break-word; background: #f0f2f4; padding: 6px 8px; margin: 4px 0;
      border-radius: 4px; }
table { border-collapse: collapse; background: #fff; margin: 6px 0; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef1f4; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.banner { padding: 14px 18px; border-radius: 6px; color: #fff; margin-bottom: 14px; }
.banner.ok { background: #1e7e34; } .banner.no { background: #b3261e; } .banner.diag { background: #57606a; }
.banner .word { font-size: 24px; font-weight: 700; letter-spacing: .5px; }
.banner .detail { margin-top: 4px; }
.v { display: inline-block; padding: 0 6px; border-radius: 3px; font-weight: 600; font-size: 12px; }
.v-pass { background: #d7f0dd; color: #14532d; } .v-fail, .v-error { background: #fbd5d2; color: #7f1d1d; }
.v-not-applicable, .v-skipped, .v-not-run { background: #e5e7eb; color: #374151; }
.v-unverified { background: #fdf0c4; color: #713f12; }
.failure { background: #fff; border-left: 4px solid #b3261e; padding: 8px 12px; margin: 10px 0; }
details.group { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; margin: 8px 0; }
details.group > summary { cursor: pointer; padding: 8px 12px; font-weight: 600; }
details.group[open] > summary { border-bottom: 1px solid #d0d7de; }
details.group > div { padding: 6px 12px 10px; }
.counts { font-weight: 400; color: #4b5563; margin-left: 8px; }
.muted { color: #6b7280; }
dl.env { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; background: #fff; padding: 10px 14px;
         border: 1px solid #d0d7de; border-radius: 6px; }
dl.env dt { font-weight: 600; } dl.env dd { margin: 0; }
figure.plot { background: #fff; border: 1px solid #d0d7de; border-radius: 6px; margin: 8px 0; padding: 6px 10px; }
figure.plot figcaption { font-weight: 600; margin-bottom: 2px; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _verdict(verdict: str) -> str:
    return f'<span class="v v-{_e(verdict)}">{_e(verdict)}</span>'


def _clause(contract: Contract, cid: str) -> Clause | None:
    """The clause in the kit's contract; None for an id it does not hold (a report of another version)."""
    return contract.get(cid) if cid in contract else None


def _failing_first(clauses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failing MUST clauses, then other failing ones, then the rest; report order within each."""

    def rank(c: dict[str, Any]) -> int:
        if c["verdict"] in ("fail", "error"):
            return 0 if c["level"] == "MUST" else 1
        return 2

    return sorted(clauses, key=rank)


def _header(report: dict[str, Any]) -> list[str]:
    b = report["backend"]
    word, detail = certificate(report)
    style = {"CERTIFIED": "ok", "DIAGNOSTIC": "diag"}.get(word, "no")
    return [
        f"<h1>Certification report: {_e(b.get('name') or b.get('spec'))}</h1>",
        f'<div class="banner {style}" id="verdict"><div class="word">{_e(word)}</div>'
        f'<div class="detail">{_e(detail)}</div>'
        f'<div class="detail">profile: <b>{_e(report.get("profile") or "none")}</b>; contract '
        f"{_e(report['contract']['version'])}; hermes-backend-kit {_e(report['kit']['version'])}; run "
        f"{_e(report['started_at'])}, {_e(report['duration_s'])} s; complete: "
        f"{'yes' if report['complete'] else 'no'}</div></div>",
    ]


def _why_not(report: dict[str, Any]) -> list[str]:
    """The reasons; past the first few (a narrowed run skips every other MUST clause) behind a fold."""
    if report["certified"]:
        return []
    reasons = [f"<li>{_e(r)}</li>" for r in report["not_certified_because"]]
    out = ["<h2>Why not certified</h2><ul>", *reasons[:REASONS_SHOWN], "</ul>"]
    if len(reasons) > REASONS_SHOWN:
        out += [
            f"<details><summary>and {len(reasons) - REASONS_SHOWN} more</summary><ul>",
            *reasons[REASONS_SHOWN:],
            "</ul></details>",
        ]
    return out


def _failures(report: dict[str, Any], contract: Contract) -> list[str]:
    failing = _failing_first([c for c in report["clauses"] if c["verdict"] in ("fail", "error")])
    if not failing:
        return []
    out = [
        "<h2>Failures</h2>",
        '<p class="muted">MUST clauses first: each one the backend must fix (or waive) to be certified.</p>',
    ]
    for c in failing:
        clause = _clause(contract, c["id"])
        waived = " (waived)" if "waived" in c else ""
        out.append(
            f'<div class="failure"><h3><code>{_e(c["id"])}</code> {_e(c["level"])}{waived} '
            f"{_verdict(c['verdict'])}</h3>"
        )
        if clause:
            out.append(f'<p>{_e(clause.statement)}</p><p class="muted">source: {_e(clause.source)}</p>')
            if clause.fix:
                out.append(f"<p><b>How to fix:</b> {_e(clause.fix)}</p>")
        for check in c["checks"]:
            if check["outcome"] not in ("passed", "skipped"):
                out.append(
                    f"<p><code>{_e(check['id'])}</code> {_e(check['outcome'])}</p>"
                    f"<pre>{_e(check.get('excerpt', ''))}</pre>"
                )
        out.append("</div>")
    return out


def _summary(report: dict[str, Any]) -> list[str]:
    groups = group_counts(report)
    shown = columns(report)
    head = "".join(f"<th>{_e(LABELS.get(c, c))}</th>" for c in shown)
    out = ["<h2>Summary</h2>", f"<table><tr><th>group</th>{head}<th>MUST failed</th></tr>"]
    for group, row in groups.items():
        cells = "".join(f'<td class="n">{row[c]}</td>' for c in shown)
        out.append(
            f'<tr><td><a href="#group-{_e(group)}">{_e(group)}</a></td>{cells}'
            f"<td>{_e(', '.join(row['must_failed']) or '-')}</td></tr>"
        )
    totals = "".join(f'<td class="n">{sum(r[c] for r in groups.values())}</td>' for c in shown)
    out.append(f"<tr><th>total</th>{totals}<td>{_e(report['summary']['must']['fail'])}</td></tr></table>")
    out += [
        "<h3>Profiles</h3>",
        '<p class="muted">A certificate names the strongest profile whose MUST clauses were all observed '
        "and pass; unverified clauses (the kit could not observe them on this run) never count.</p>",
        "<table><tr><th>profile</th><th>MUST covered</th><th>pass</th><th>not applicable</th><th>waived</th>"
        "<th>unverified</th><th>failing</th><th>met</th></tr>",
    ]
    for name, row in report["profiles"].items():
        mark = " (certified)" if name == report.get("profile") else ""
        out.append(
            f'<tr><td>{_e(name)}{mark}</td><td class="n">{row["must"]}</td><td class="n">{row["pass"]}'
            f'</td><td class="n">{row["not-applicable"]}</td><td class="n">{row["waived"]}</td>'
            f'<td class="n">{len(row["unverified"])}</td><td class="n">{len(row["failing"])}</td>'
            f"<td>{'yes' if row['met'] else 'no'}</td></tr>"
        )
    out.append("</table>")
    lines = undeclared_lines(report)
    if lines:
        out += [
            "<h3>Undeclared capabilities</h3>",
            '<p class="muted">Optional capabilities the backend neither declares nor disclaims; one whose code '
            "shows signs of it is probed as if declared. Declare what the backend offers and disclaim the "
            "rest.</p><ul>",
            *(f"<li>{_e(line.removeprefix('undeclared capability '))}</li>" for line in lines),
            "</ul>",
        ]
    return out


def _evidence(c: dict[str, Any]) -> str:
    items = []
    for check in c["checks"]:
        text = f"<code>{_e(check['id'])}</code> {_e(check['outcome'])}, {_e(check['duration_s'])} s"
        if check.get("black_box"):
            text += " (black-box)"
        if check.get("excerpt"):
            text += f"<pre>{_e(check['excerpt'])}</pre>"
        items.append(f"<li>{text}</li>")
    return f"<ul>{''.join(items)}</ul>" if items else '<span class="muted">no check ran</span>'


def _groups(report: dict[str, Any], contract: Contract) -> list[str]:
    by_group: dict[str, list[dict[str, Any]]] = {}
    for c in report["clauses"]:
        by_group.setdefault(c["group"], []).append(c)
    counts = group_counts(report)
    out = [
        "<h2>Verdicts per group</h2>",
        '<p class="muted">Each group opens on click; a group with a failure is open. Within a group, failing '
        "MUST clauses come first.</p>",
    ]
    for group, clauses in by_group.items():
        row = counts[group]
        failed = any(c["verdict"] in ("fail", "error") for c in clauses)
        tally = ", ".join(f"{row[v]} {v}" for v in VERDICT_ORDER if row.get(v))
        out.append(
            f'<details class="group" id="group-{_e(group)}"{" open" if failed else ""}>'
            f'<summary>{_e(group)} <span class="counts">{_e(tally)}</span></summary><div>'
            "<table><tr><th>clause</th><th>level</th><th>verdict</th><th>evidence</th></tr>"
        )
        for c in _failing_first(clauses):
            clause = _clause(contract, c["id"])
            title = f'<br><span class="muted">{_e(clause.title)}</span>' if clause else ""
            # a failure's reason repeats its checks' excerpts, shown with the evidence
            reason = c.get("reason") if c["verdict"] not in ("fail", "error") else None
            notes = f'<p class="muted">{_e(reason)}</p>' if reason else ""
            if "waived" in c:
                w = c["waived"]
                notes += (
                    f'<p class="muted">waived: {_e(w.get("reason"))} ({_e(w.get("issue"))}, until '
                    f"{_e(w.get('expires'))})</p>"
                )
            out.append(
                f'<tr id="clause-{_e(c["id"])}"><td><code>{_e(c["id"])}</code>{title}</td>'
                f"<td>{_e(c['level'])}</td><td>{_verdict(c['verdict'])}</td><td>{notes}{_evidence(c)}</td></tr>"
            )
        out.append("</table></div></details>")
    return out


def _fault_matrix(report: dict[str, Any]) -> list[str]:
    out = [
        "<h2>Fault matrix</h2>",
        '<p class="muted">Each fault the kit scripts through a fake, and the clause that judges it.</p>',
        f"<table><tr><th>fault</th><th>clause</th><th>{_e(matrix.column(report))}</th></tr>",
    ]
    for fault, clause, cells in matrix.rows([report]):
        out.append(f"<tr><td>{_e(fault)}</td><td><code>{_e(clause)}</code></td><td>{_verdict(cells[0])}</td></tr>")
    out.append("</table>")
    return out


def _bench(bench: dict[str, Any]) -> list[str]:
    from conformance.report import bench_plot

    machine = bench.get("machine") or {}
    out = [
        '<h2 id="bench">Benchmarks</h2>',
        f'<p class="muted">{_e(bench.get("created"))}, Python {_e(machine.get("python"))}, '
        f"{_e(machine.get('cpus'))} CPUs{', quick sizes' if (bench.get('options') or {}).get('quick') else ''}. "
        "Bars: value / value of local <code>bash -c</code> (log scale; red: worse than local, green: as good "
        "or better).</p>",
    ]
    world = bench.get("world")
    if isinstance(world, dict) and world.get("ratio") is not None:
        out.append(
            f"<p>box world: spawn p50 {_e(world.get('spawn_p50_ms'))} ms vs bash -c "
            f"{_e(world.get('bash_c_p50_ms'))} ms (ratio {_e(world.get('ratio'))}).</p>"
        )
    for label, svg in bench_plot.plots(bench):
        caption = re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(label))  # the labels mark commands as Markdown code
        out.append(f'<figure class="plot"><figcaption>{caption}</figcaption>{svg}</figure>')
    return out


def _environment(report: dict[str, Any]) -> list[str]:
    b, h = report["backend"], report["host"]
    rows: list[tuple[str, str]] = [
        (
            "backend",
            f"{b.get('spec')} (provider {b.get('name')}, plugin {b.get('plugin')} {b.get('version') or ''})".replace(
                " )", ")"
            ),
        ),
        ("capabilities", ", ".join(b.get("capabilities") or []) or "none"),
        ("declared", f"{', '.join(b.get('declared_capabilities') or []) or 'none'} (by {b.get('declared_by')})"),
        ("disclaimed", ", ".join(b.get("disclaimed_capabilities") or []) or "none"),
        (
            "host",
            f"{h.get('mode')} (requested {h.get('requested')})"
            + (f", {hermes_release(h)}" if hermes_release(h) else "")
            + (f" from {h['where']}" if h.get("where") else ""),
        ),
        ("service", "live" if report["live"] else f"fake {report['fake']}" if report.get("fake") else "no fake"),
    ]
    missing = [name for name, present in (h.get("features") or {}).items() if not present]
    if missing:
        rows.append(("host features missing", ", ".join(missing)))
    rows += [("host gap", gap["note"].removeprefix("host gap: ")) for gap in h.get("gaps") or ()]
    if report.get("fake_world"):
        rows.append(("fake boxes", fake_world_line(report["fake_world"])))
    if report.get("credentials"):
        rows.append(("credentials", credentials_line(report["credentials"])))
    rows += [
        (
            "contract",
            f"version {report['contract']['version']}, {report['contract'].get('clauses')} clauses, "
            f"sha256 {report['contract'].get('sha256')}",
        ),
        (
            "kit",
            f"{report['kit'].get('name')} {report['kit']['version']}, checks sha256 "
            f"{report['kit'].get('checks_sha256') or '-'}",
        ),
        ("run", f"{report['started_at']}, {report['duration_s']} s, complete: {'yes' if report['complete'] else 'no'}"),
    ]
    rows += [("incomplete", r) for r in report.get("incomplete_reasons") or []]
    env = report.get("environment") or {}
    rows.append(
        (
            "machine",
            f"{env.get('implementation')} {env.get('python')} on {env.get('platform')} "
            f"({env.get('machine')}, {env.get('cpus')} CPUs)",
        )
    )
    rows += [
        ("waiver", f"{w.get('clause')}: {w.get('reason')} ({w.get('issue')}, until {w.get('expires')})")
        for w in report.get("waivers") or []
    ]
    rows += [("waiver error", e) for e in report.get("errors") or []]
    return [
        "<h2>Run environment</h2>",
        '<dl class="env">',
        *(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows),
        "</dl>",
    ]


def missing_fields(report: Any) -> list[str]:
    """The top-level fields of a certification report that ``report`` lacks (all of them for a non-object)."""
    if not isinstance(report, dict):
        return list(FIELDS)
    return [name for name in FIELDS if name not in report]


def render(report: dict[str, Any], contract: Contract, bench: dict[str, Any] | None = None) -> str:
    """The whole page.  ``bench``: benchmark results (bench_plot.load) to plot, or None."""
    report = redact.redact_data(report)
    b = report["backend"]
    word, _ = certificate(report)
    title = f"{word}: {b.get('name') or b.get('spec')} (hermes-backend-kit report)"
    body = [
        *_header(report),
        *_why_not(report),
        *_failures(report, contract),
        *_summary(report),
        *_groups(report, contract),
        *_fault_matrix(report),
        *(_bench(bench) if bench else []),
        *_environment(report),
    ]
    return (
        "\n".join(
            [
                "<!DOCTYPE html>",
                '<html lang="en"><head><meta charset="utf-8">',
                f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
                '<meta name="viewport" content="width=device-width, initial-scale=1">',
                f"<title>{_e(title)}</title>",
                '<link rel="icon" href="data:,">',  # no favicon request
                f"<style>{STYLE}</style></head><body><main>",
                *body,
                '<p class="muted">Written by hermes-backend-kit; <code>hermes-backend-kit verify report.json</code> '
                "re-derives every verdict from its checks.</p>",
                "</main></body></html>",
            ]
        )
        + "\n"
    )
