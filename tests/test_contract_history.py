"""Released contract versions, the changelog, `since`, and comparing reports across versions."""

from __future__ import annotations

import copy
import itertools
import json

import yaml

from conformance import cli, contract, contract_history
from conformance.report import compare
from tests.test_verdicts import _report

CURRENT = contract.load()


def _kinds(first: str, second: str) -> dict[str, str]:
    return {cid: change.kind for cid, change in contract_history.between(first, second).items()}


def test_every_released_version_is_kept_and_the_bundled_one_is_newest():
    versions = list(contract_history.released())
    assert versions[0] == "1.0" and versions[-1] == CURRENT.version
    assert versions == sorted(versions, key=contract.version_key)


def test_since_agrees_with_the_released_contracts():
    """A clause added after 1.0 says so, and no clause claims an older version than the one that added it."""
    released = contract_history.released()
    for clause in CURRENT:
        first = next(v for v, clauses in released.items() if any(c["id"] == clause.id for c in clauses))
        assert clause.since == first, f"{clause.id}: since {clause.since}, but first released in {first}"


def test_changes_tell_added_changed_revised_and_removed_apart():
    old = (
        {"id": "a.x", "level": "MUST", "title": "t", "statement": "s  one", "source": "x"},
        {"id": "a.y", "level": "MUST", "title": "t", "statement": "s", "source": "x"},
        {"id": "a.z", "level": "SHOULD", "title": "t", "statement": "s", "source": "x"},
        {"id": "a.gone", "level": "MAY", "title": "t", "statement": "s", "source": "x"},
    )
    new = (
        {"id": "a.x", "level": "MUST", "title": "t", "statement": "s one", "source": "x"},  # whitespace only
        {"id": "a.y", "level": "MUST", "title": "t", "statement": "s", "source": "better source"},
        {"id": "a.z", "level": "MUST", "title": "t", "statement": "s", "source": "x"},
        {"id": "a.new", "level": "MUST", "title": "t", "statement": "s", "source": "x"},
    )
    found = {c.clause: c for c in contract_history.changes(old, new)}
    assert set(found) == {"a.y", "a.z", "a.new", "a.gone"}
    assert (found["a.y"].kind, found["a.y"].fields) == ("revised", ("source",))
    assert (found["a.z"].kind, found["a.z"].fields) == ("changed", ("level SHOULD → MUST",))
    assert found["a.new"].kind == "added" and found["a.gone"].kind == "removed"


def test_2_0_holds_the_host_retry_loop_fix():
    kinds = _kinds("1.0", "2.0")
    assert kinds["errors.no-timeout-word"] == "added"
    assert kinds["faults.dropped-mid-command"] == "changed"
    assert "exec.returncode-key" not in kinds


def test_3_0_makes_the_clauses_of_unreleased_hermes_code_proposals():
    kinds = _kinds("2.0", "3.0")
    assert kinds["provider.workspace-binding-checked"] == "changed"
    assert kinds["provider.config-schema"] == "changed"
    assert kinds["sync.protected-dirs"] == "changed"
    assert "exec.returncode-key" not in kinds


def test_the_changelog_lists_every_change_under_its_version():
    text = contract_history.changelog()
    versions = list(contract_history.released())
    assert versions[-1] == CURRENT.version
    for old, new in itertools.pairwise(versions):
        section = text.split(f"## {new}\n", 1)[1].split("\n## ", 1)[0]
        for cid, kind in _kinds(old, new).items():
            heading = contract_history.HEADINGS[kind]
            assert f"`{cid}`" in section.split(f"### {heading}", 1)[1].split("\n### ", 1)[0], (new, cid, kind)


def test_compare_across_versions_lists_contract_changes_not_mismatches():
    new = _report("pass")
    old = copy.deepcopy(new)
    old["contract"]["version"] = 1  # what reports of contract 1.0 recorded
    old["clauses"] = [c for c in old["clauses"] if c["id"] != "errors.no-timeout-word"]
    for entry in old["clauses"]:
        if entry["id"] == "faults.dropped-mid-command":
            entry["verdict"] = "fail"
    diffs = {d.clause: d for d in compare.compare(old, new)}
    assert diffs["errors.no-timeout-word"].kind == "contract-change"
    assert diffs["errors.no-timeout-word"].first == "absent"
    assert diffs["errors.no-timeout-word"].detail.startswith(f"added in {CURRENT.version}")
    assert diffs["faults.dropped-mid-command"].kind == "contract-change"
    assert not [d for d in diffs.values() if d.kind == "mismatch"]
    lines = compare.describe(list(diffs.values()), versions=compare.versions_of(old, new))
    assert lines[0].startswith(f"contract 1.0 -> {CURRENT.version}:")
    assert lines[-1].endswith("verdicts are equivalent")


def test_compare_within_one_version_still_flags_a_moved_verdict(tmp_path, capsys):
    first, second = _report("pass"), _report("pass")
    entry = next(c for c in second["clauses"] if c["id"] == "exec.returncode-key")
    entry["verdict"] = "fail"
    paths = []
    for name, report in (("a.json", first), ("b.json", second)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(report))
    assert cli.main(["report", "compare", *map(str, paths)]) == 1
    assert "exec.returncode-key: " in capsys.readouterr().out


def test_compare_names_a_file_that_is_not_a_report(tmp_path, capsys):
    bad = tmp_path / "notes.json"
    bad.write_text(json.dumps({"hello": 1}))
    assert cli.main(["report", "compare", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert "notes.json: not a certification report" in err and "report.json" in err


def test_the_stored_1_0_contract_is_the_released_text():
    data = yaml.safe_load(
        contract_history.resources.files("conformance").joinpath("contracts/1.0.yaml").read_text("utf-8")
    )
    assert data["version"] == 1 and len(data["clauses"]) == 127
