"""The fault matrix: every fault row, one column per report, failures named and counted."""

from __future__ import annotations

import json
import subprocess
import sys

from conformance import contract
from conformance.report import matrix


def _report(name: str, verdicts: dict[str, str]) -> dict:
    return {"backend": {"name": name}, "clauses": [{"id": k, "verdict": v} for k, v in verdicts.items()]}


def test_every_row_names_a_clause_of_the_contract():
    ids = {c.id for c in contract.load().clauses}
    assert {clause for _, clause in matrix.FAULTS} <= ids


def test_cells_follow_each_report_and_failures_are_named():
    good = _report("alpha", {clause: "pass" for _, clause in matrix.FAULTS})
    bad = _report("beta", {"faults.silent-server": "fail", "faults.output-flood": "not-applicable"})
    table = matrix.markdown([good, bad])
    assert table.splitlines()[0] == "| fault | clause | alpha | beta |"
    assert "| server silent | `faults.silent-server` | pass | **FAIL** |" in table
    assert "| output flood | `faults.output-flood` | pass | n/a |" in table
    assert "| 429 on create | `faults.create-rate-limited` | pass | absent |" in table
    assert matrix.failing([good, bad]) == ["beta: faults.silent-server"]


def test_cli_exit_status_and_unreadable_reports(tmp_path):
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(_report("alpha", {clause: "pass" for _, clause in matrix.FAULTS})))
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    cli = [sys.executable, "-m", "conformance.cli", "report", "matrix"]
    done = subprocess.run([*cli, str(ok), "--out", str(tmp_path / "m.md")], capture_output=True, text=True)
    assert done.returncode == 0 and (tmp_path / "m.md").read_text().count("| pass |") == len(matrix.FAULTS)
    done = subprocess.run([*cli, str(broken)], capture_output=True, text=True)
    assert done.returncode == 2 and f"cannot read report {broken}" in done.stderr and "Traceback" not in done.stderr
