"""Verdict aggregation, the report and the host-equivalence comparison."""

from __future__ import annotations

from conformance import contract, verdicts
from conformance.report import build, compare, table
from conformance.verdicts import CheckOutcome, aggregate

CONTRACT = contract.load()
MUST = next(c.id for c in CONTRACT if c.level == "MUST")


def _outcome(nodeid: str, outcome: str, reason: str = "", clause: str = MUST) -> CheckOutcome:
    check = CheckOutcome(nodeid, (clause,))
    check.absorb("setup", "passed", "", 0.01)
    check.absorb("call", outcome, reason, 0.1)
    return check


def _verdict(*outcomes: CheckOutcome) -> tuple[str, str]:
    v = next(v for v in aggregate(CONTRACT, outcomes) if v.id == MUST)
    return v.verdict, v.reason


def test_fail_beats_everything():
    assert _verdict(_outcome("a", "passed"), _outcome("b", "failed", "boom"))[0] == "fail"


def test_a_generic_skip_is_never_a_pass():
    assert _verdict(_outcome("a", "passed"), _outcome("b", "skipped", "no docker"))[0] == "skipped"


def test_not_applicable_only_when_every_check_is():
    na = "not-applicable (capability: the run lacks persistence)"
    assert _verdict(_outcome("a", "skipped", na)) == ("not-applicable", na)
    assert _verdict(_outcome("a", "skipped", na), _outcome("b", "passed"))[0] == "pass"


def test_a_clause_nothing_checked_is_not_run():
    verdicts = {v.id: v for v in aggregate(CONTRACT, [])}
    assert verdicts[MUST].verdict == "not-run" and verdicts[MUST].reason == "no check of this clause ran in this run"


def test_setup_error_counts_as_failure():
    check = CheckOutcome("a", (MUST,))
    check.absorb("setup", "failed", "could not create the environment", 0.1)
    assert _verdict(check) == ("fail", "a: setup: could not create the environment")


def _report(verdict: str, reason: str = "", *, complete: bool = True, waivers=()) -> dict:
    outcome = _outcome("a", {"pass": "passed", "fail": "failed"}.get(verdict, "skipped"), reason)
    context = {"backend": {"spec": "x", "name": "x"}, "host": {"mode": "builtin", "requested": "auto"}}
    return build.build(
        CONTRACT,
        [outcome],
        context,
        duration_s=1.0,
        started_at=0.0,
        spec="x",
        host_requested="auto",
        complete=complete,
        waivers=list(waivers),
    )


def test_certified_needs_no_must_failure_and_no_must_skip():
    assert _report("fail")["certified"] is False
    assert _report("pass")["certified"] is False  # every other MUST clause was not run
    lines = table.render(_report("fail"))
    assert lines[-1].startswith("NOT CERTIFIED") and any(MUST.split(".", 1)[1] in line for line in lines)


def test_certification_is_recomputable_from_the_report():
    report = _report("fail")
    assert verdicts.certification(report) == (report["certified"], report["profile"], report["not_certified_because"])
    assert any(MUST in reason for reason in report["not_certified_because"])
    assert "the run is not complete" in _report("pass", complete=False)["not_certified_because"]


def test_compare_allows_only_host_caused_differences():
    base = _report("pass")
    host_na = _report("skipped", "not-applicable (host: the hermes host lacks cwd-observed)")
    failing = _report("fail")
    assert [d.kind for d in compare.compare(base, host_na)] == ["host-not-applicable"]
    assert [d.kind for d in compare.compare(base, failing)] == ["mismatch"]
    assert compare.describe(compare.compare(base, base))[-1].endswith("verdicts are equivalent")


def test_an_excerpt_keeps_its_error_line_and_shows_control_characters_as_escapes():
    """report.md is text (a raw NUL makes tools take it for binary) and a long traceback keeps the line
    that names its error, its last."""
    from conformance.report.build import EXCERPT_CHARS, clip

    traceback_text = (
        "Traceback (most recent call last):\n" + "  frame\n" * 200 + "ModuleNotFoundError: No module named 'x'"
    )
    kept = clip(traceback_text)
    assert len(kept) == EXCERPT_CHARS and kept.startswith("Traceback") and kept.endswith("No module named 'x'")
    assert clip("out\x00put\x1b[1m\tand\nmore") == "out\\x00put\\x1b[1m\tand\nmore"
    assert clip("short") == "short"
