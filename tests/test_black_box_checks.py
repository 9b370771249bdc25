"""Black-box checks: gated by their own harness needs, able to fail a world clause, never to pass it alone."""

from __future__ import annotations

import copy

import pytest

from conformance import manifest
from conformance.report import verify
from conformance.verdicts import CheckOutcome, applicability, combine
from tests.conftest import certify
from tests.report_sim import CONTRACT, DECLARED, WORLD, rederive, run

OWN = "lifecycle.delete-own-only"
REPLACED = "persist.deleted-replaced"
WORLD_CHECK = "conformance/checks/test_lifecycle.py::test_cleanup_deletes_only_its_own_sandbox"
BLACK_BOX_CHECK = "conformance/checks/test_black_box.py::test_cleanup_leaves_other_sessions_running_with_their_files"
UNVERIFIED = "unverified (harness: the run has no world, so the kit could not observe this clause)"


def _outcome(nodeid: str, outcome: str, reason: str = "", black_box: bool = False) -> CheckOutcome:
    return CheckOutcome(nodeid, (OWN,), outcome, reason, 0.1, black_box)


def test_a_black_box_check_is_gated_by_its_own_harness_needs_only():
    own, replaced = CONTRACT.get(OWN), CONTRACT.get(REPLACED)
    persistent_kept = CONTRACT.get("lifecycle.persistent-kept")
    assert applicability(CONTRACT, own, DECLARED)[0] == "unverified"
    assert applicability(CONTRACT, own, DECLARED, black_box=()) == ("applies", "")
    kind, reason = applicability(CONTRACT, replaced, DECLARED, black_box=("sandbox-delete",))
    assert kind == "unverified" and reason.startswith("unverified (harness: the run has no sandbox-delete")
    assert (
        applicability(CONTRACT, replaced, DECLARED | {"sandbox-delete"}, black_box=("sandbox-delete",))[0] == "applies"
    )
    # a capability the backend does not claim still makes the clause not applicable
    assert applicability(CONTRACT, persistent_kept, set(), black_box=())[0] == "not-applicable"


@pytest.mark.parametrize(
    "world, black_box, verdict",
    [
        (("skipped", UNVERIFIED), ("passed", ""), "unverified"),  # part of the clause seen: still unverified
        (("skipped", UNVERIFIED), ("failed", "twin session broken"), "fail"),  # a violation is a violation
        (("passed", ""), ("passed", ""), "pass"),
        (("passed", ""), ("failed", "twin session broken"), "fail"),
    ],
)
def test_a_black_box_pass_never_stands_in_for_the_world_check(world, black_box, verdict):
    found, reason = combine([_outcome(WORLD_CHECK, *world), _outcome(BLACK_BOX_CHECK, *black_box, black_box=True)])
    assert found == verdict, reason
    if verdict == "unverified":
        assert reason.startswith(UNVERIFIED) and "black-box check(s) passed" in reason


def test_the_manifest_lists_the_black_box_checks_and_what_each_needs():
    shipped = manifest.shipped()
    black_box = shipped["black_box"]
    assert black_box[BLACK_BOX_CHECK.removeprefix("conformance/checks/")] == []
    cited = {cid for check in black_box for cid in shipped["cites"][check]}
    assert {OWN, REPLACED, "lifecycle.gone-counts-deleted", "lifecycle.nonpersistent-deleted"} <= cited
    for check in black_box:  # each observes part of a clause the world-based checks cover
        assert all({"world", "world-states"} & set(CONTRACT.get(cid).capabilities) for cid in shipped["cites"][check])


def test_without_a_world_a_black_box_failure_fails_the_clause_and_the_certificate():
    report = run(DECLARED, fail={OWN})
    clause = next(c for c in report["clauses"] if c["id"] == OWN)
    assert clause["verdict"] == "fail"
    assert {e["id"]: e["outcome"] for e in clause["checks"]} == {
        WORLD_CHECK.removeprefix("conformance/checks/"): "skipped",
        BLACK_BOX_CHECK.removeprefix("conformance/checks/"): "failed",
    }
    assert report["certified"] is False and f"MUST clause {OWN} failed" in report["not_certified_because"]
    assert verify.problems(report) == []
    passing = run(DECLARED)
    assert next(c for c in passing["clauses"] if c["id"] == OWN)["verdict"] == "unverified"
    assert passing["certified"] is True and passing["profile"] == "black-box"


def test_verify_catches_a_black_box_failure_relabelled_or_its_flag_dropped():
    failing = run(DECLARED, fail={OWN})
    relabelled = copy.deepcopy(failing)
    clause = next(c for c in relabelled["clauses"] if c["id"] == OWN)
    for check in clause["checks"]:
        check.update(outcome="skipped", excerpt=UNVERIFIED)
    clause.update(verdict="unverified", reason=UNVERIFIED)
    rederive(relabelled)
    assert relabelled["certified"] is True
    found = verify.problems(relabelled)
    assert any(p.startswith(f"{OWN}: test_black_box.py::") and "the run has every capability" in p for p in found), (
        found
    )
    unflagged = copy.deepcopy(run(DECLARED))
    evidence = next(e for c in unflagged["clauses"] if c["id"] == OWN for e in c["checks"] if e.get("black_box"))
    evidence.pop("black_box")
    assert any(
        "is a black-box check in this kit version, but the report says otherwise" in p
        for p in verify.problems(unflagged)
    )


def test_a_black_box_marker_must_name_harness_capabilities(pytester):
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.black_box("persistence")
        @pytest.mark.clause("lifecycle.delete-own-only")
        def test_x():
            pass
    """
    )
    result = pytester.runpytest("--collect-only", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*black_box names persistence, which are not harness capabilities*"])


def test_with_a_world_both_kinds_of_check_must_pass():
    report = run(DECLARED | WORLD | {"sandbox-delete"})
    clause = next(c for c in report["clauses"] if c["id"] == REPLACED)
    assert clause["verdict"] == "pass" and [e["outcome"] for e in clause["checks"]] == ["passed", "passed"]
    assert verify.problems(report) == []


@pytest.mark.suite
def test_a_backend_ignoring_force_remove_is_not_certified_even_without_a_world(tmp_path):
    """No fake, so no world: the black-box check of lifecycle.force-remove alone must catch the mutant."""
    run = certify("--backend", "fakes.mutants.force_remove_ignored:provider", out=tmp_path / "out", cwd=tmp_path)
    assert run.done.returncode == 1 and run.report and not run.report["certified"], run.output()
    assert run.report["fake"] is None and run.verdicts()["lifecycle.force-remove"] == "fail"
    assert "MUST clause lifecycle.force-remove failed" in run.report["not_certified_because"]
