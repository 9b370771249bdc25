"""The whole suite against tempdir_box: certified, from any directory, with a full report."""

from __future__ import annotations

import pytest

from conformance import contract
from tests.conftest import run_suite

# A whole suite in a subprocess with its own workers, beside test_certification's certify of the same
# backend: the full tier (see noxfile.py).
pytestmark = [pytest.mark.suite, pytest.mark.full]


@pytest.fixture(scope="module")
def tempdir_run(tmp_path_factory):
    return run_suite("--backend", "tempdir_box", cwd=tmp_path_factory.mktemp("anywhere"))


def test_tempdir_box_is_certified(tempdir_run):
    report = tempdir_run.report
    assert report is not None, tempdir_run.output[-3000:]
    failed = {c["id"]: c.get("reason") for c in report["clauses"] if c["verdict"] == "fail"}
    assert not failed, failed
    assert report["summary"]["must"]["fail"] == 0
    assert report["summary"]["must"]["skipped"] == 0, [
        c for c in report["clauses"] if c["verdict"] == "skipped" and c["level"] == "MUST"
    ]
    assert report["certified"] is True
    assert tempdir_run.returncode == 0, tempdir_run.output[-3000:]


def test_report_carries_what_certification_needs(tempdir_run):
    report = tempdir_run.report
    assert report["kit"]["version"] and report["contract"]["version"] == contract.load().version
    assert report["backend"]["spec"] == "tempdir_box" and report["backend"]["name"] == "tempdir_box"
    assert report["host"]["mode"] in ("builtin", "hermes")
    assert len(report["clauses"]) == len(contract.load())
    assert all(set(c) >= {"id", "level", "verdict"} for c in report["clauses"])
    for level in ("must", "should"):
        assert {"pass", "fail"} <= set(report["summary"][level])
    assert report["duration_s"] > 0
    assert "persistence" in report["backend"]["capabilities"]


def test_run_prints_the_group_table(tempdir_run):
    assert "verdicts per group" in tempdir_run.output
    assert "CERTIFIED: backend tempdir_box" in tempdir_run.output


def test_not_applicable_clauses_name_their_cause(tempdir_run):
    for clause in tempdir_run.report["clauses"]:
        if clause["verdict"] == "not-applicable":
            assert clause["reason"].startswith(
                ("not-applicable (capability", "not-applicable (host", "not-applicable (")
            ), clause
