"""Traceability both ways: every clause has a check, every check cites known clauses."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance import contract, traceability

CONTRACT = contract.load()


@pytest.fixture(scope="module")
def coverage():
    return traceability.coverage(CONTRACT)


def test_every_clause_has_a_check(coverage):
    assert not coverage.uncovered, f"clauses without a check: {coverage.uncovered}"
    assert coverage.percent == 100.0


def test_every_check_cites_a_clause(coverage):
    assert not coverage.uncited_checks, f"checks citing no clause: {coverage.uncited_checks}"


def test_a_check_cites_clauses_with_one_applicability(coverage):
    """Applicability is decided per check, so its clauses must agree on what they need."""
    for nodeid, ids in coverage.checks.items():
        needs = {(CONTRACT.get(i).capabilities, CONTRACT.get(i).host_feature) for i in ids}
        assert len(needs) == 1, f"{nodeid} cites clauses with different capabilities/host features: {ids}"


def test_a_check_citing_an_unknown_clause_is_refused(pytester):
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.clause("exec.no-such-clause")
        def test_x():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cites unknown clause(s) exec.no-such-clause*"])


def test_coverage_cli_reports_json():
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "contract", "coverage", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["clauses"] == len(CONTRACT) >= 80
    assert data["percent"] == 100.0
