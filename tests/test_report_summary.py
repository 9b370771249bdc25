"""`report summary`: the one-line-per-backend table `nox -s conformance` ends with."""

from __future__ import annotations

import json

from conformance import cli
from tests.test_verdicts import _report


def test_report_summary_lists_every_backend_and_fails_unless_all_are_certified(tmp_path, capsys):
    good, bad = _report("pass"), _report("fail")
    good["certified"], good["profile"] = True, "full"  # as a complete run of every check would say
    bad["backend"]["name"] = "broken_box"
    paths = []
    for name, report in (("good.json", good), ("bad.json", bad)):
        paths.append(str(tmp_path / name))
        (tmp_path / name).write_text(json.dumps(report))
    assert cli.main(["report", "summary", paths[0]]) == 0
    assert cli.main(["report", "summary", *paths]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 of 2 backend(s) certified"
    assert any(line.startswith("broken_box") and "NOT CERTIFIED" in line for line in out)
    assert any(line.startswith("broken_box: ") and "MUST" in line for line in out)
