"""verify re-derives a report from its own evidence: every forgery that breaks a rule is named."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from conformance import verdicts
from conformance.report import verify
from tests.report_sim import DECLARED, WORLD, rederive, run

BROKEN = "lifecycle.delete-own-only"


@pytest.fixture(scope="module")
def failing() -> dict:
    report = run(DECLARED | WORLD, fail={BROKEN})
    assert report["certified"] is False
    return report


def _clause(report: dict, cid: str) -> dict:
    return next(c for c in report["clauses"] if c["id"] == cid)


@pytest.mark.parametrize("present", [DECLARED, DECLARED | WORLD, DECLARED | {"remote"}])
def test_honest_reports_verify(present, failing):
    assert verify.problems(run(present)) == []
    assert verify.problems(failing) == []


def test_flipped_verdicts_with_a_recomputed_summary_fail_naming_the_clause(failing):
    forged = copy.deepcopy(failing)
    for clause in forged["clauses"]:
        if clause["verdict"] == "fail":
            clause["verdict"] = "pass"
            clause.pop("reason", None)
    rederive(forged)
    assert forged["certified"] is True and forged["profile"] == "full"  # the forger's summary adds up
    found = verify.problems(forged)
    assert any(p.startswith(f"{BROKEN}: verdict is pass but its checks say fail") for p in found), found


def test_a_failing_check_relabelled_unverified_is_caught(failing):
    forged = copy.deepcopy(failing)
    clause = _clause(forged, BROKEN)
    for check in clause["checks"]:
        check.update(
            outcome="skipped",
            excerpt="unverified (harness: the run has no world, so the kit could not observe this clause)",
        )
    clause["verdict"], clause["reason"] = verdicts.combine(verdicts.from_evidence(BROKEN, clause["checks"]))
    rederive(forged)
    found = verify.problems(forged)
    assert any(p.startswith(f"{BROKEN}: ") and "the run has every capability its clauses need" in p for p in found), (
        found
    )


def test_a_check_that_found_itself_unverified_while_running_verifies(failing):
    honest = copy.deepcopy(failing)
    clause = _clause(honest, BROKEN)
    for check in clause["checks"]:
        check.update(
            outcome="skipped", excerpt="unverified (harness: the fault meant to make the connection drop never fired)"
        )
    clause["verdict"], clause["reason"] = verdicts.combine(verdicts.from_evidence(BROKEN, clause["checks"]))
    rederive(honest)
    assert clause["verdict"] == "unverified"
    assert verify.problems(honest) == []


def test_a_failing_check_dropped_from_the_evidence_is_caught(failing):
    forged = copy.deepcopy(failing)
    clause = _clause(forged, BROKEN)
    clause["checks"] = [c for c in clause["checks"] if c["outcome"] != "failed"]
    clause["verdict"], _ = verdicts.combine(verdicts.from_evidence(BROKEN, clause["checks"]))
    clause.pop("reason", None)
    rederive(forged)
    found = verify.problems(forged)
    assert any(p.startswith(f"{BROKEN}: the run is marked complete but the outcome of") for p in found), found


def test_a_must_clause_relabelled_should_is_caught(failing):
    forged = copy.deepcopy(failing)
    _clause(forged, BROKEN)["level"] = "SHOULD"
    rederive(forged)
    assert any(p.startswith(f"{BROKEN}: level SHOULD") for p in verify.problems(forged))


def test_a_world_claim_removed_to_dodge_the_full_profile_is_caught():
    forged = run(DECLARED | WORLD)
    forged["backend"]["capabilities"] = sorted(DECLARED)
    found = verify.problems(forged)
    assert any("passed although the run could not run it" in p for p in found), found


@pytest.mark.parametrize(
    "edit, problem",
    [
        (
            lambda r: r.update(profile="full"),
            "certified is True (profile full) but the verdicts say True (profile black-box)",
        ),
        (lambda r: r["profiles"]["full"].update(unverified=[]), "profile full does not follow from the verdicts"),
        (
            lambda r: r["summary"]["must"].update(unverified=0),
            "summary does not match the clause verdicts (must unverified: 0 -> ",
        ),
        (lambda r: r.update(certified=False), "certified is False (profile black-box) but the verdicts say True"),
        (lambda r: r.update(incomplete_reasons=["edited"]), "marked complete but lists reasons"),
        (lambda r: r.update(format=1), "report format 1, made by kit"),
    ],
)
def test_derived_fields_are_rederived(edit, problem):
    report = run(DECLARED)
    edit(report)
    found = verify.problems(report)
    assert any(problem in p for p in found), (problem, found)


def test_verify_command_says_what_offline_verification_proves_and_what_not(tmp_path, failing):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(run(DECLARED), indent=2))
    ok = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith(f"OK {path}: CERTIFIED (black-box profile: ")
    assert "internal consistency" in ok.stdout and "kit version" in ok.stdout and "unedited checks" in ok.stdout
    assert "It cannot show that the run happened" in ok.stdout and "a re-run" in ok.stdout
    forged = rederive(json.loads(json.dumps(failing)))
    _clause(forged, BROKEN)["verdict"] = "pass"
    path.write_text(json.dumps(rederive(forged)))
    bad = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "verify", str(path)], capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 1 and f"FAIL {BROKEN}: verdict is pass but its checks say fail" in bad.stdout
    assert "Traceback" not in bad.stdout + bad.stderr
