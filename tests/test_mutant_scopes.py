"""Every mutant's SCOPE selects every check of every clause it breaks.

tests/test_mutants.py runs each mutant's suite limited to its SCOPE (a ``-k``
expression) and compares the failed clauses with BREAKS.  A clause checked by
two checks still fails when the scope leaves one of them out, so that test
alone would not notice a scope too narrow.  Here each SCOPE is evaluated the
way pytest's ``-k`` evaluates it, against the collected checks, without
running any of them.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from typing import Any

import pytest
from _pytest.mark import KeywordMatcher
from _pytest.mark.expression import Expression

from fakes.mutants import MUTANTS


class _Keywords:
    """Per collected check: the clauses it cites and what ``-k`` matches it by."""

    def __init__(self) -> None:
        self.checks: dict[str, tuple[set[str], Any]] = {}

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            cited = {str(a) for mark in item.iter_markers("clause") for a in mark.args}
            self.checks[item.nodeid] = (cited, KeywordMatcher.from_item(item))


@pytest.fixture(scope="module")
def checks() -> dict[str, tuple[set[str], Any]]:
    collector = _Keywords()
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = pytest.main(
            ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--pyargs", "conformance.checks"],
            plugins=[collector],
        )
    assert code == pytest.ExitCode.OK, sink.getvalue()[-3000:]
    assert collector.checks, "no check was collected"
    return collector.checks


@pytest.mark.parametrize("name", MUTANTS)
def test_the_scope_selects_every_check_of_the_clauses_the_mutant_breaks(name, checks, builtin_host):
    module = importlib.import_module(f"fakes.mutants.{name}")
    scope = getattr(module, "SCOPE", None)
    assert scope, f"mutant {name} has no SCOPE: its test would run the whole suite"
    expression = Expression.compile(scope)
    breaks = set(module.BREAKS)
    needed = {nodeid for nodeid, (cited, _) in checks.items() if cited & breaks}
    assert {c for cited, _ in checks.values() for c in cited} >= breaks, f"{name}: BREAKS names a clause no check cites"
    left_out = sorted(nodeid for nodeid in needed if not expression.evaluate(checks[nodeid][1]))
    assert not left_out, f"mutant {name}: SCOPE {scope!r} leaves out checks of its BREAKS: {left_out}"
    selected = sum(1 for _, matcher in checks.values() if expression.evaluate(matcher))
    assert selected < len(checks), f"mutant {name}: SCOPE {scope!r} selects the whole suite"


def test_the_mutants_run_on_two_workers_are_mutants():
    from tests.test_mutants import TWO_WORKERS

    assert set(MUTANTS) >= TWO_WORKERS, sorted(TWO_WORKERS - set(MUTANTS))
