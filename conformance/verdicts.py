"""Turn check outcomes into one verdict per clause.

A clause's verdict combines every check that cites it:

- ``fail`` if any check failed or errored;
- else ``skipped`` if any check was skipped for a reason other than
  applicability (a skip can hide a regression, so it is never a pass);
- else ``pass`` if any check passed;
- else ``not-applicable`` (every check was, by capability or by host);
- a clause no check ran for is ``skipped`` with the reason "no check ran".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from conformance.contract import Contract

NA_PREFIX = "not-applicable"
VERDICTS = ("pass", "fail", "not-applicable", "skipped")


@dataclass
class CheckOutcome:
    nodeid: str
    clauses: tuple[str, ...]
    outcome: str = "passed"  # passed | failed | skipped
    reason: str = ""
    duration_s: float = 0.0

    @property
    def not_applicable(self) -> bool:
        return self.outcome == "skipped" and self.reason.startswith(NA_PREFIX)

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
        verdict, reason = _combine(results)
        verdicts.append(ClauseVerdict(
            clause.id, clause.level, clause.group, verdict, reason,
            sorted(o.nodeid for o in results), round(sum(o.duration_s for o in results), 3),
        ))
    return verdicts


def _combine(results: list[CheckOutcome]) -> tuple[str, str]:
    if not results:
        return "skipped", "no check ran"
    failed = [o for o in results if o.outcome == "failed"]
    if failed:
        return "fail", "; ".join(f"{o.nodeid.rsplit('::', 1)[-1]}: {o.reason}" for o in failed)[:2000]
    skipped = [o for o in results if o.outcome == "skipped" and not o.not_applicable]
    if skipped:
        return "skipped", "; ".join(o.reason for o in skipped)[:500]
    if any(o.outcome == "passed" for o in results):
        return "pass", ""
    return "not-applicable", results[0].reason


def summarize(verdicts: Iterable[ClauseVerdict]) -> dict[str, dict[str, int]]:
    summary = {level.lower(): dict.fromkeys(VERDICTS, 0) for level in ("MUST", "SHOULD", "MAY")}
    for v in verdicts:
        summary[v.level.lower()][v.verdict] += 1
    return summary
