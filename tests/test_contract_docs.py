"""docs/contract/ is generated from contract.yaml and must not go stale."""

from __future__ import annotations

from pathlib import Path

from conformance import contract, contract_docs, traceability

DOCS = Path(__file__).resolve().parents[1] / "docs" / "contract"


def test_committed_contract_docs_are_current():
    expected = contract_docs.render(contract.load(), traceability.collect())
    stale = [
        name
        for name, text in expected.items()
        if not (DOCS / name).is_file() or (DOCS / name).read_text("utf-8") != text
    ]
    extra = sorted(p.name for p in DOCS.glob("*.md") if p.name not in expected)
    assert not stale and not extra, (
        f"docs/contract is stale ({stale or extra}); run `python -m conformance.contract_docs` and commit"
    )


def test_every_clause_has_its_section():
    pages = contract_docs.render(contract.load(), {})
    text = "\n".join(pages.values())
    for clause in contract.load():
        assert f"## `{clause.id}`" in text
