"""Not applicable versus unverified, certification profiles, and how every output names the profile."""

from __future__ import annotations

import datetime as dt

import pytest

from conformance import verdicts
from conformance.report import junit, markdown, table
from conformance.report.headline import headline
from conformance.verdicts import CheckOutcome, applicability, combine, gate_reason
from conformance.waivers import Waiver
from tests.report_sim import CONTRACT, DECLARED, WORLD, must_needing, run

TRANSPORT = must_needing("transport-faults")


def _clause(capability: str):
    """A MUST clause that needs ``capability`` and, at most, the kind every sandbox backend has."""
    return next(c for c in CONTRACT if set(c.capabilities) - {"per-task-sandbox"} == {capability} and c.level == "MUST")


def test_a_missing_backend_capability_is_not_applicable_and_a_missing_harness_one_unverified():
    persistence, world, faults = _clause("persistence"), _clause("world"), _clause("transport-faults")
    assert applicability(CONTRACT, persistence, set())[0] == "not-applicable"
    kind, reason = applicability(CONTRACT, world, DECLARED)
    assert kind == "unverified" and reason.startswith("unverified (harness: the run has no world")
    assert applicability(CONTRACT, world, DECLARED | WORLD) == ("applies", "")
    # transport-faults concerns remote backends only: a local backend has no transport to fault
    assert applicability(CONTRACT, faults, DECLARED)[0] == "not-applicable"
    assert applicability(CONTRACT, faults, DECLARED | {"remote"})[0] == "unverified"
    assert applicability(CONTRACT, faults, DECLARED | {"remote", "transport-faults"})[0] == "applies"


def test_not_claimed_wins_over_not_observable_in_a_check_citing_both():
    both = next(c for c in CONTRACT if set(c.capabilities) == {"persistence", "world"})
    assert gate_reason(CONTRACT, [both.id], set()).startswith("not-applicable (capability: the run lacks persistence")
    assert gate_reason(CONTRACT, [both.id], {"persistence"}).startswith("unverified (")


def _outcome(outcome: str, reason: str = "") -> CheckOutcome:
    check = CheckOutcome(f"t::{outcome}{len(reason)}", ("x",))
    check.absorb("call", outcome, reason, 0.1)
    return check


def test_combine_keeps_unverified_apart_from_not_applicable():
    unverified = _outcome("skipped", "unverified (harness: the run has no world, ...)")
    na = _outcome("skipped", "not-applicable (capability: the run lacks persistence)")
    assert combine([unverified])[0] == "unverified"
    assert combine([na, unverified])[0] == "unverified"
    assert combine([unverified, _outcome("passed")])[0] == "pass"
    assert combine([unverified, _outcome("failed", "boom")])[0] == "fail"
    assert combine([na])[0] == "not-applicable"


def test_a_local_backend_without_a_world_is_certified_black_box_only():
    report = run(DECLARED)
    unverified = must_needing("world", "world-states")
    assert report["certified"] is True and report["profile"] == "black-box"
    full, black_box = report["profiles"]["full"], report["profiles"]["black-box"]
    assert set(full["unverified"]) == unverified and full["met"] is False
    assert black_box["met"] is True and black_box["unverified"] == []
    assert black_box["must"] == full["must"] - len(unverified | TRANSPORT)
    assert report["summary"]["must"]["unverified"] == len(unverified)
    clauses = {c["id"]: c for c in report["clauses"]}
    assert all(clauses[cid]["verdict"] == "not-applicable" for cid in TRANSPORT)  # local: no transport
    text = headline(report)
    assert text.startswith(f"CERTIFIED (black-box profile: {black_box['pass']}/{black_box['pass']} MUST clauses pass")
    assert text.endswith(f"{len(unverified)} MUST unverified, need the full profile)")


def test_a_remote_backend_without_a_fake_leaves_world_and_transport_unverified():
    report = run(DECLARED | {"remote"})
    assert report["profile"] == "black-box"
    assert set(report["profiles"]["full"]["unverified"]) == must_needing("world", "world-states", "transport-faults")
    with_world = run(DECLARED | {"remote"} | WORLD)
    assert with_world["profile"] == "black-box", "a remote backend needs transport faults for full"
    assert set(with_world["profiles"]["full"]["unverified"]) == TRANSPORT


@pytest.mark.parametrize("present", [DECLARED | WORLD, DECLARED | WORLD | {"remote", "transport-faults"}])
def test_every_harness_capability_needed_gives_full(present):
    report = run(present)
    assert report["certified"] is True and report["profile"] == "full"
    assert report["profiles"]["full"]["unverified"] == []
    assert headline(report).startswith("CERTIFIED (full profile:") and "unverified" not in headline(report)


def test_a_verified_failure_outside_the_certified_profile_still_blocks():
    report = run(DECLARED | WORLD, fail={"lifecycle.delete-own-only"})
    assert report["profiles"]["black-box"]["met"] is True
    assert report["profiles"]["full"]["failing"] == ["lifecycle.delete-own-only"]
    assert report["certified"] is False and report["profile"] is None
    assert report["not_certified_because"] == ["MUST clause lifecycle.delete-own-only failed"]
    assert headline(report).startswith("NOT CERTIFIED (MUST ")


def test_a_waived_failure_counts_in_its_profile():
    waiver = Waiver(
        "lifecycle.delete-own-only", "known", "https://example.invalid/1", dt.date.today() + dt.timedelta(days=9), False
    )
    report = run(DECLARED | WORLD, fail={waiver.clause}, waivers=[waiver])
    full = report["profiles"]["full"]
    assert report["profile"] == "full" and full["waived"] == 1 and full["failing"] == []
    assert f"{full['pass']}/{full['pass'] + 1} MUST clauses pass, 1 waived" in headline(report)


def test_unverified_must_clauses_cannot_be_waived_into_a_profile():
    cid = "lifecycle.delete-own-only"
    waiver = Waiver(cid, "cannot observe", "https://example.invalid/1", dt.date.today() + dt.timedelta(days=9), False)
    report = run(DECLARED, waivers=[waiver])
    assert report["profile"] == "black-box" and cid in report["profiles"]["full"]["unverified"]


def test_badge_table_markdown_and_junit_name_the_profile():
    full, black_box, failing = run(DECLARED | WORLD), run(DECLARED), run(DECLARED, fail={"exec.result-shape"})
    assert markdown.badge(full)["message"].startswith("certified, full (")
    assert markdown.badge(full)["color"] == "brightgreen"
    badge = markdown.badge(black_box)
    assert badge["message"].startswith("certified, black-box (") and badge["color"] == "green"
    assert markdown.badge(failing)["color"] == "red" and "not certified" in markdown.badge(failing)["message"]
    lines = table.render(black_box)
    assert lines[-1].startswith("CERTIFIED: backend sim on host builtin; black-box profile:")
    assert any(line.startswith("profile full:") and "MUST unverified" in line for line in lines)
    assert table.render(failing)[-1].startswith("NOT CERTIFIED: backend sim")
    md = markdown.render(black_box, CONTRACT)
    assert "**CERTIFIED** (black-box profile:" in md and "| black-box (certified) |" in md
    assert "## Unverified: the kit could not observe these" in md
    assert ("hermes_backend_kit.profile", "black-box") in junit.properties(black_box)
    assert ("hermes_backend_kit.profile", "none") in junit.properties(failing)


def test_profile_scopes_follow_the_contract():
    every_must = {c.id for c in CONTRACT if c.level == "MUST"}
    assert set(verdicts.profile_scope(CONTRACT, "full")) == every_must
    assert set(verdicts.profile_scope(CONTRACT, "black-box")) == every_must - must_needing(
        "world", "world-states", "transport-faults"
    )
    assert list(CONTRACT.profiles) == ["full", "black-box"]  # strongest first
