"""Every decision between check outcomes and a certificate, in one place.

The plugin's gate, the report builder and ``verify`` all call these, so a
report can be re-derived from its own evidence with the same rules.

Applicability of a clause to a run (``applicability``):

- ``not-applicable``: the clause needs a declared or provider capability the
  backend does not have (it does not claim the behaviour), or a harness
  capability that is ``only_for`` backends it is not (a local backend has no
  transport to fault);
- ``unverified``: the clause needs a harness capability the run lacks (no
  world view, no world states, no transport faults): the kit could not look.
  An unverified MUST clause never counts toward certification.

A black-box check (``black_box``: the harness capabilities it needs itself,
often none) observes its clauses through the backend alone: the clauses'
harness capabilities do not gate it, only its own do.  It can show a
violation, never the whole clause: see ``combine``.

A clause's verdict combines every check that cites it (``combine``):

- ``fail`` if any check failed or errored;
- else ``skipped`` if any check was skipped for a reason other than
  applicability (a skip can hide a regression, so it is never a pass);
- else ``pass`` if any check that is not black-box passed, or a black-box
  check passed and no check was unverified;
- else ``unverified`` if any check was skipped as unverified (a world-based
  check the run could not make, even when a black-box check of the same
  clause passed: that check sees only part of what the clause says);
- else ``not-applicable`` (every check was, by capability, host or backend);
- a clause no check ran for is ``not-run`` (a narrowed run: ``--select``,
  ``-k``, node ids).  It is no failure of the backend, but a run with one is
  incomplete, so it never certifies: the certificate says how many MUST
  clauses were not run.

Undeclared capabilities (``probed``, ``undeclared``): a declared capability
the backend neither declares nor disclaims is *undeclared*.  When the kit
found signs that the backend implements it (conformance/signs.py: attributes
such as ``self._persistent``, a FileSyncManager, constructor options,
plugin.yaml or config-schema settings), the run *probes* it: the capability
counts as present, so its clauses' checks run, and they get verdicts like
any other.  Without signs, its clauses are not applicable.

The rule for a probe's failures: a probed MUST clause that fails blocks
certification exactly like a declared one (waivable like any other).  Signs
mean Hermes will exercise that code (it passes container_persistent to
every backend and calls the sync hooks it finds), so a broken undeclared
feature is a broken feature, not an absent one; a backend whose signs
mislead says so with one line (disclaim the capability), which the report
and badge then show.  A probe that passes counts as passes, and the report
and badge still list the capability as undeclared.

Certification (``certification``): the run reached the backend, is complete
and not narrowed (a run with a ``selection`` is a diagnostic run), no waiver
is in error, no MUST clause failed or was skipped unless waived
(probed ones included), and some profile is met.  A profile covers the MUST
clauses whose harness capabilities it lists; it is met when none of them is
unverified, failing or skipped (unless waived).  The certificate names the
first profile met, in the contract's order (strongest first).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from conformance.contract import Clause, Contract

NA_PREFIX = "not-applicable"
UNVERIFIED_PREFIX = "unverified"
NOT_RUN = "not-run"
VERDICTS = ("pass", "fail", "not-applicable", "unverified", "skipped", NOT_RUN)
LEVELS = ("must", "should", "may")
APPLIES = "applies"


# ------------------------------------------------------------------ applicability
def harness_capabilities(contract: Contract) -> frozenset[str]:
    return frozenset(n for n, c in contract.capabilities.items() if c["determined_by"] == "harness")


def applicability(
    contract: Contract, clause: Clause, present: Collection[str], black_box: Collection[str] | None = None
) -> tuple[str, str]:
    """(``applies`` | ``not-applicable`` | ``unverified``, the skip reason) of ``clause`` for a run.

    ``black_box``: for a black-box check, the harness capabilities it needs
    itself (they replace the clause's); None for any other check.
    """
    harness = harness_capabilities(contract)
    lacking = [c for c in clause.capabilities if c not in present]
    unclaimed = [c for c in lacking if c not in harness]
    if unclaimed:
        why = "; ".join(contract.capabilities[c]["absent"] for c in unclaimed if contract.capabilities[c].get("absent"))
        return NA_PREFIX, f"{NA_PREFIX} (capability: the run lacks {', '.join(unclaimed)}{': ' + why if why else ''})"
    for cap in lacking:
        only_for = contract.capabilities[cap].get("only_for")
        if only_for and only_for not in present:
            return NA_PREFIX, (
                f"{NA_PREFIX} (capability: {cap} concerns {only_for} backends only; this backend is not {only_for})"
            )
    if black_box is not None:
        lacking = [c for c in black_box if c not in present]
    if lacking:
        return UNVERIFIED_PREFIX, (
            f"{UNVERIFIED_PREFIX} (harness: the run has no {', '.join(lacking)}, "
            "so the kit could not observe this clause)"
        )
    return APPLIES, ""


def gate_reason(
    contract: Contract, clause_ids: Iterable[str], present: Collection[str], black_box: Collection[str] | None = None
) -> str | None:
    """The skip reason of a check citing ``clause_ids``, or None when it runs.

    Not-applicable wins over unverified: a behaviour the backend does not
    claim needs no observing.  ``black_box`` as for ``applicability``.
    """
    found = [applicability(contract, contract.get(cid), present, black_box) for cid in clause_ids]
    for kind in (NA_PREFIX, UNVERIFIED_PREFIX):
        for got, reason in found:
            if got == kind:
                return reason
    return None


# ------------------------------------------------------------------ check outcomes -> clause verdicts
@dataclass
class CheckOutcome:
    nodeid: str
    clauses: tuple[str, ...]
    outcome: str = "passed"  # passed | failed | skipped
    reason: str = ""
    duration_s: float = 0.0
    black_box: bool = False  # observes its clauses through the backend alone (a partial view)

    @property
    def not_applicable(self) -> bool:
        return self.outcome == "skipped" and self.reason.startswith(NA_PREFIX)

    @property
    def unverified(self) -> bool:
        return self.outcome == "skipped" and self.reason.startswith(UNVERIFIED_PREFIX)

    def absorb(self, when: str, outcome: str, reason: str, duration: float) -> None:
        """Fold one phase (setup/call/teardown) of a check into its outcome."""
        self.duration_s += duration
        if outcome == "failed":
            if self.outcome != "failed":
                self.reason = f"{when}: {reason}" if when != "call" else reason
            self.outcome = "failed"
        elif outcome == "skipped" and self.outcome == "passed":
            self.outcome, self.reason = "skipped", reason


@dataclass
class ClauseVerdict:
    id: str
    level: str
    group: str
    verdict: str
    reason: str = ""
    checks: list[str] = field(default_factory=list)
    duration_s: float = 0.0


def aggregate(contract: Contract, outcomes: Iterable[CheckOutcome]) -> list[ClauseVerdict]:
    by_clause: dict[str, list[CheckOutcome]] = {}
    for outcome in outcomes:
        for cid in outcome.clauses:
            by_clause.setdefault(cid, []).append(outcome)
    verdicts = []
    for clause in contract:
        results = by_clause.get(clause.id, [])
        verdict, reason = combine(results)
        verdicts.append(
            ClauseVerdict(
                clause.id,
                clause.level,
                clause.group,
                verdict,
                reason,
                sorted(o.nodeid for o in results),
                round(sum(o.duration_s for o in results), 3),
            )
        )
    return verdicts


def combine(results: list[CheckOutcome]) -> tuple[str, str]:
    """(verdict, reason) of one clause from the outcomes of the checks citing it."""
    if not results:
        return NOT_RUN, "no check of this clause ran in this run"
    failed = [o for o in results if o.outcome == "failed"]
    if failed:
        return "fail", "; ".join(f"{o.nodeid.rsplit('::', 1)[-1]}: {o.reason}" for o in failed)[:2000]
    skipped = [o for o in results if o.outcome == "skipped" and not o.not_applicable and not o.unverified]
    if skipped:
        return "skipped", "; ".join(o.reason for o in skipped)[:500]
    passed = [o for o in results if o.outcome == "passed"]
    unverified = [o for o in results if o.unverified]
    if any(not o.black_box for o in passed) or (passed and not unverified):
        return "pass", ""
    if unverified:
        seen = (
            (
                f"; its black-box check(s) passed ({', '.join(o.nodeid.rsplit('::', 1)[-1] for o in passed)}), "
                "which shows no violation but not the whole clause"
            )
            if passed
            else ""
        )
        return "unverified", unverified[0].reason + seen
    return "not-applicable", results[0].reason


def from_evidence(
    clause_id: str, evidence: Iterable[dict[str, Any]], black_box: Collection[str] = ()
) -> list[CheckOutcome]:
    """The check outcomes a report's clause entry records (reasons as far as the excerpts keep them);
    ``black_box``: the check ids (manifest keys) that are black-box checks."""
    return [
        CheckOutcome(
            e["id"], (clause_id,), e["outcome"], e.get("excerpt", ""), e.get("duration_s", 0.0), e["id"] in black_box
        )
        for e in evidence
    ]


# ------------------------------------------------------------------ clause verdicts -> summary, profiles, certificate
def summarize(clauses: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per level, how many clauses got each verdict, and how many of them are waived (``not-run`` only
    when a clause was not run: a complete run's summary has the same keys it always had)."""
    summary = {level: {**{v: 0 for v in VERDICTS if v != NOT_RUN}, "waived": 0} for level in LEVELS}
    for c in clauses:
        row = summary[c["level"].lower()]
        row[c["verdict"]] = row.get(c["verdict"], 0) + 1
        row["waived"] += "waived" in c
    return summary


def _blocking(clause: dict[str, Any]) -> bool:
    """A MUST clause that failed or was skipped and is not waived."""
    return clause["level"] == "MUST" and clause["verdict"] in ("fail", "skipped") and "waived" not in clause


def profile_scope(contract: Contract, profile: str) -> list[str]:
    """The MUST clauses ``profile`` covers: those needing no harness capability outside it."""
    outside = harness_capabilities(contract) - set(contract.profiles[profile]["harness"])
    return [c.id for c in contract if c.level == "MUST" and not outside & set(c.capabilities)]


def profiles(contract: Contract, clauses: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per profile, in the contract's order: its MUST clauses by verdict, and whether it is met."""
    by_id = {c["id"]: c for c in clauses}
    out = {}
    for name in contract.profiles:
        scope = [by_id[cid] for cid in profile_scope(contract, name) if cid in by_id]
        row: dict[str, Any] = {
            "must": len(scope),
            "pass": sum(c["verdict"] == "pass" for c in scope),
            "not-applicable": sum(c["verdict"] == "not-applicable" for c in scope),
            "waived": sum("waived" in c for c in scope),
            "failing": sorted(c["id"] for c in scope if _blocking(c)),
            "unverified": sorted(c["id"] for c in scope if c["verdict"] == "unverified"),
        }
        not_run = sorted(c["id"] for c in scope if c["verdict"] == NOT_RUN)
        if not_run:
            row[NOT_RUN] = not_run
        row["met"] = not row["failing"] and not row["unverified"] and not not_run
        out[name] = row
    return out


# ------------------------------------------------------------------ undeclared capabilities and probes
def probed(backend: dict[str, Any]) -> list[str]:
    """The capabilities a run probed: undeclared ones with signs of support."""
    return sorted(n for n, signs in (backend.get("undeclared_capabilities") or {}).items() if signs)


def undeclared(contract: Contract, clauses: Iterable[dict[str, Any]], backend: dict[str, Any]) -> list[dict[str, Any]]:
    """Per undeclared capability: its signs, and for a probed one what its clauses' verdicts were.

    ``probe`` is ``failed`` when a clause needing it failed, ``passed`` when
    none failed and every MUST one passed (or is not applicable for another
    reason), ``incomplete`` otherwise (unverified or skipped), and
    ``not run`` when no sign was found (its clauses are not applicable).
    """
    by_id = {c["id"]: c for c in clauses}
    out = []
    for name, signs in sorted((backend.get("undeclared_capabilities") or {}).items()):
        needing = [by_id[c.id] for c in contract if name in c.capabilities and c.id in by_id]
        entry: dict[str, Any] = {"capability": name, "signs": list(signs), "clauses": sorted(c["id"] for c in needing)}
        if not signs:
            entry["probe"] = "not run"
            out.append(entry)
            continue
        failed = sorted(c["id"] for c in needing if c["verdict"] == "fail")
        entry["failed"] = failed
        entry["must_failed"] = sorted(c["id"] for c in needing if c["verdict"] == "fail" and c["level"] == "MUST")
        entry["passed"] = sorted(c["id"] for c in needing if c["verdict"] == "pass")
        open_must = [c for c in needing if c["level"] == "MUST" and c["verdict"] in ("unverified", "skipped", NOT_RUN)]
        entry["probe"] = "failed" if failed else ("incomplete" if open_must else "passed")
        out.append(entry)
    return out


def _probe_of(report: dict[str, Any], clause_id: str) -> str | None:
    """The probed capability a clause was run for, if any."""
    for entry in report.get("undeclared", []):
        if entry.get("probe") not in (None, "not run") and clause_id in entry["clauses"]:
            return entry["capability"]
    return None


def certification(report: dict[str, Any]) -> tuple[bool, str | None, list[str]]:
    """(certified, profile, why not) from a report's own fields (``profiles`` and ``undeclared`` included)."""
    reasons = []
    if not report.get("backend", {}).get("name"):
        reasons.append("no check reached the backend")
    if report.get("selection"):
        reasons.append(f"a diagnostic run narrowed by {report['selection']}: never certified")
    elif not report.get("complete"):
        reasons.append("the run is not complete")
    not_run = sum(1 for c in report.get("clauses", []) if c["level"] == "MUST" and c["verdict"] == NOT_RUN)
    if not_run:
        reasons.append(f"{not_run} MUST clause(s) not run")
    reasons += [f"waiver error: {e}" for e in report.get("errors", [])]
    for clause in report.get("clauses", []):
        if _blocking(clause):
            reason = f"MUST clause {clause['id']} {'failed' if clause['verdict'] == 'fail' else 'was skipped'}"
            capability = _probe_of(report, clause["id"])
            if capability:
                reason += (
                    f" (probe of undeclared capability {capability}: the backend shows signs of it; "
                    f"declare {capability} and fix this, or disclaim it)"
                )
            reasons.append(reason)
    rows = report.get("profiles", {})
    met = [name for name, row in rows.items() if row["met"]]
    if not met and not not_run and not any(_blocking(c) for c in report.get("clauses", [])):
        reasons.append(
            "no certification profile is met: "
            + "; ".join(f"{name} has {len(row['unverified'])} unverified MUST clause(s)" for name, row in rows.items())
        )
    if reasons:
        return False, None, reasons
    return True, met[0], []
