"""Re-derive a certification report offline, with the rules that built it.

``problems`` re-checks, against the installed kit version:

- the schema, the kit version, the contract (version and hash) and the check
  manifest (``checks_sha256``: the check files that ran are this version's,
  unedited);
- each clause's level and group against the contract, and its evidence
  against the manifest (a check listed under a clause must cite it; a
  complete run lists every check that does);
- each check's skip: a check the run's capabilities gate must carry exactly
  the gate's reason, and a check they do not gate cannot claim one (a
  black-box check, as the manifest lists it, by its own harness needs);
- the backend's capabilities: none both declared and disclaimed, the
  undeclared ones exactly those neither, and the declared capabilities
  present exactly the declared ones and the probed ones (undeclared, with
  signs);
- each clause verdict from its checks' outcomes, the waiver markings from the
  waivers, the summary from the verdicts, the profiles and the undeclared
  capabilities' probes from the verdicts, and the certificate (certified,
  profile, reasons) from all of them.

The signs themselves come from the backend's code, which the report does not
hold: verify takes them as the report states them.

All of it uses conformance.verdicts, the functions the report builder uses.
Offline verification cannot show that the run happened: see ``CANNOT``.
"""

from __future__ import annotations

import datetime as dt
import json
from importlib import resources
from pathlib import Path
from typing import Any

from conformance import __version__, contract, manifest, verdicts
from conformance.errors import ReportFileError
from conformance.report.build import EXCERPT_CHARS, REPORT_FORMAT
from conformance.waivers import Waiver, apply

PROVES = (
    "internal consistency: every clause verdict follows from the outcomes of the checks that cite it, "
    "the summary from the verdicts, the profiles and the certificate from the verdicts and waivers",
    "kit version: the report was made by this kit version, against its contract",
    "unedited checks: the check files that ran hash as this kit version ships them, and each clause lists "
    "the checks that cite it",
)
CANNOT = (
    "that the run happened: a self-consistent report can be written without running anything; a re-run "
    "(`hermes-backend-kit certify`) or a signature by a key you trust (`verify --signature SIG "
    "--public-key PUB`) shows that"
)

# What a gate (verdicts.gate_reason) says; a check may also find itself unverified while it runs (a
# scripted fault that never fired), which needs no missing capability.
_GATE_PREFIXES = (f"{verdicts.NA_PREFIX} (capability:", f"{verdicts.UNVERIFIED_PREFIX} (harness: the run has no ")
_HOST_PREFIX = f"{verdicts.NA_PREFIX} (host: "


def schema() -> dict[str, Any]:
    return json.loads(resources.files("conformance").joinpath("report.schema.json").read_text("utf-8"))


def problems(report: Any) -> list[str]:
    """Everything wrong with ``report``; empty when it verifies."""
    import jsonschema

    if not isinstance(report, dict):
        return ["the report is not a JSON object"]
    if report.get("format") != REPORT_FORMAT:
        made_by = (report.get("kit") or {}).get("version", "?") if isinstance(report.get("kit"), dict) else "?"
        return [
            f"report format {report.get('format')!r}, made by kit {made_by}: this kit ({__version__}) "
            f"verifies format {REPORT_FORMAT}; verify it with the kit version that made it"
        ]
    validator = jsonschema.Draft202012Validator(schema())
    found = [
        f"schema: {'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(report), key=lambda e: list(e.absolute_path))
    ]
    if found:
        return found
    kit_contract = contract.load()
    shipped = manifest.shipped()
    if report["kit"]["version"] != __version__:
        found.append(f"made by kit {report['kit']['version']}, this is {__version__}: verify with that version")
    if report["kit"]["checks_sha256"] != shipped["checks_sha256"]:
        found.append("the checks that ran are not this kit version's checks (checks_sha256 differs)")
    if report["contract"]["sha256"] != kit_contract.sha256 or report["contract"]["version"] != kit_contract.version:
        found.append("the contract the report cites is not this kit version's contract")
    if sorted(c["id"] for c in report["clauses"]) != sorted(c.id for c in kit_contract):
        found.append("the report's clauses are not the contract's clauses")
        return found  # nothing below can be re-derived clause by clause
    found += _capabilities(report, kit_contract)
    found += _clauses(report, kit_contract, shipped)
    found += _waivers(report)
    found += _decision(report, kit_contract)
    return found


def _capabilities(report: dict[str, Any], kit_contract: contract.Contract) -> list[str]:
    """Declared, disclaimed, undeclared and present capabilities agree with each other."""
    backend = report["backend"]
    if not backend.get("name"):
        return []  # no check reached the backend: nothing was resolved
    found = []
    declarable = {n for n, c in kit_contract.capabilities.items() if c["determined_by"] == "declared"}
    declared = set(backend.get("declared_capabilities") or [])
    disclaimed = set(backend.get("disclaimed_capabilities") or [])
    undeclared = backend.get("undeclared_capabilities") or {}
    present = set(backend.get("capabilities") or [])
    if declared & disclaimed:
        found.append(f"capabilities: {', '.join(sorted(declared & disclaimed))} both declared and disclaimed")
    if set(undeclared) != declarable - declared - disclaimed:
        found.append(
            f"capabilities: the undeclared ones are {', '.join(sorted(undeclared)) or 'none'}, but neither "
            f"declared nor disclaimed are {', '.join(sorted(declarable - declared - disclaimed)) or 'none'}"
        )
    expected = declared | set(verdicts.probed(backend))
    if present & declarable != expected:
        found.append(
            f"capabilities: present are {', '.join(sorted(present & declarable)) or 'none'} of the "
            f"declarable ones, but declared and probed are {', '.join(sorted(expected)) or 'none'}"
        )
    return found


def _clauses(report: dict[str, Any], kit_contract: contract.Contract, shipped: dict[str, Any]) -> list[str]:
    """Level, group, evidence, skips and verdict of every clause."""
    found = []
    cites: dict[str, list[str]] = shipped.get("cites", {})
    black_box: dict[str, list[str]] = shipped.get("black_box", {})
    citing: dict[str, set[str]] = {}
    for check, ids in cites.items():
        for cid in ids:
            citing.setdefault(cid, set()).add(check)
    reached = bool(report["backend"].get("name"))
    present = set(report["backend"].get("capabilities") or [])
    features = report["host"].get("features") or {}
    ran: set[str] = set()
    for entry in report["clauses"]:
        cid = entry["id"]
        clause = kit_contract.get(cid)
        if entry["level"] != clause.level or entry["group"] != clause.group:
            found.append(
                f"{cid}: level {entry['level']} / group {entry['group']} is not the contract's "
                f"({clause.level} / {clause.group})"
            )
        ids = [e["id"] for e in entry["checks"]]
        ran.update(ids)
        if len(ids) != len(set(ids)):
            found.append(f"{cid}: a check is listed twice")
        stray = sorted(set(ids) - citing.get(cid, set()))
        if stray:
            found.append(f"{cid}: lists checks that do not cite it in this kit version: {', '.join(stray)}")
        missing = sorted(citing.get(cid, set()) - set(ids))
        if report["complete"] and missing:
            found.append(f"{cid}: the run is marked complete but the outcome of {', '.join(missing)} is missing")
        for evidence in entry["checks"]:
            if bool(evidence.get("black_box")) != (evidence["id"] in black_box):
                found.append(
                    f"{cid}: {evidence['id']} is {'' if evidence['id'] in black_box else 'not '}a black-box "
                    "check in this kit version, but the report says otherwise"
                )
            if reached and evidence["id"] in cites:
                problem = _skip_problem(
                    kit_contract, evidence, cites[evidence["id"]], present, features, black_box.get(evidence["id"])
                )
                if problem:
                    found.append(f"{cid}: {problem}")
        derived, _ = verdicts.combine(verdicts.from_evidence(cid, entry["checks"], black_box))
        if derived != entry["verdict"]:
            outcomes = ", ".join(f"{e['id']} {e['outcome']}" for e in entry["checks"]) or "no check ran"
            found.append(f"{cid}: verdict is {entry['verdict']} but its checks say {derived} ({outcomes})")
    if report["complete"]:
        if report["incomplete_reasons"]:
            found.append("the run is marked complete but lists reasons it is not")
        if report["kit"]["checks_sha256"] != shipped["checks_sha256"] or ran != set(shipped["checks"]):
            found.append("the run is marked complete but its checks are not all of this kit version's checks")
    elif not report["incomplete_reasons"]:
        found.append("the run is marked incomplete without a reason")
    return found


def _skip_problem(
    kit_contract: contract.Contract,
    evidence: dict[str, Any],
    cited: list[str],
    present: set[str],
    features: dict[str, bool],
    black_box: list[str] | None,
) -> str | None:
    """Does a check's outcome agree with what the run's capabilities and host allowed?"""
    gate = verdicts.gate_reason(kit_contract, cited, present, black_box)
    excerpt = evidence.get("excerpt", "")
    if gate is not None:
        if evidence["outcome"] == "passed":
            return f"{evidence['id']} passed although the run could not run it ({gate})"
        if evidence["outcome"] == "skipped" and excerpt != gate[:EXCERPT_CHARS]:
            return f"{evidence['id']} was skipped for {excerpt!r}, but the run's capabilities say {gate!r}"
        return None
    if evidence["outcome"] == "skipped" and excerpt.startswith(_GATE_PREFIXES):
        return (
            f"{evidence['id']} claims {excerpt!r}, but the run has every capability its clauses need "
            f"({', '.join(sorted(present)) or 'none'})"
        )
    if evidence["outcome"] == "skipped" and excerpt.startswith(_HOST_PREFIX):
        lacking = {feature for cid in cited if (feature := kit_contract.get(cid).host_feature) is not None}
        if not any(features.get(f) is False for f in lacking):
            return f"{evidence['id']} claims the host lacks a feature, but the report's host has all its clauses need"
    return None


def _waivers(report: dict[str, Any]) -> list[str]:
    """The waiver markings and errors, re-applied from the report's waivers."""
    found = []
    try:
        waivers = [
            Waiver(w["clause"], w["reason"], w["issue"], dt.date.fromisoformat(w["expires"]), w["strict"])
            for w in report["waivers"]
        ]
    except ValueError as exc:
        return [f"waivers: {exc}"]
    started = report["started_at"][:10]
    for w in waivers:
        if w.expires.isoformat() < started:
            found.append(f"{w.clause}: its waiver expired on {w.expires.isoformat()}, before the run ({started})")
    fresh = [{k: v for k, v in c.items() if k != "waived"} for c in report["clauses"]]
    errors = apply(fresh, waivers)
    for old, new in zip(report["clauses"], fresh, strict=True):
        if old.get("waived") != new.get("waived"):
            state = "waived" if "waived" in old else "not waived"
            found.append(f"{old['id']}: marked {state}, but the report's waivers say otherwise")
    if errors != report["errors"]:
        found.append(f"waiver errors are {report['errors']} but the waivers and verdicts give {errors}")
    return found


def _decision(report: dict[str, Any], kit_contract: contract.Contract) -> list[str]:
    """Summary, profiles and the certificate, re-derived."""
    found = []
    summary = verdicts.summarize(report["clauses"])
    if summary != report["summary"]:
        wrong = [
            f"{level} {k}: {report['summary'].get(level, {}).get(k)} -> {v}"
            for level, row in summary.items()
            for k, v in row.items()
            if report["summary"].get(level, {}).get(k) != v
        ]
        found.append(f"summary does not match the clause verdicts ({'; '.join(wrong)})")
    rows = verdicts.profiles(kit_contract, report["clauses"])
    if rows != report["profiles"]:
        for name in sorted(set(rows) | set(report["profiles"])):
            if rows.get(name) != report["profiles"].get(name):
                found.append(
                    f"profile {name} does not follow from the verdicts: the report says "
                    f"{report['profiles'].get(name)}, the verdicts give {rows.get(name)}"
                )
    probes = verdicts.undeclared(kit_contract, report["clauses"], report["backend"])
    if probes != report["undeclared"]:
        found.append(
            f"undeclared capabilities do not follow from the backend's capabilities and the verdicts: the "
            f"report says {report['undeclared']}, they give {probes}"
        )
    certified, profile, because = verdicts.certification({**report, "profiles": rows, "undeclared": probes})
    if certified != report["certified"] or profile != report["profile"]:
        found.append(
            f"certified is {report['certified']} (profile {report['profile']}) but the verdicts say "
            f"{certified} (profile {profile})"
            + (f": {'; '.join(because[:5])}" if because else "")
            + (f"; and {len(because) - 5} more" if len(because) > 5 else "")
        )
    elif because != report["not_certified_because"]:
        found.append("not_certified_because does not match the verdicts")
    return found


def load(path: str | Path) -> tuple[Any, list[str]]:
    """(the parsed report, problems reading it)."""
    from conformance.report import files

    try:
        return files.read_json(path), []
    except ReportFileError as exc:
        return None, [exc.what]


def verify_file(path: str | Path) -> list[str]:
    report, found = load(path)
    return found or problems(report)
