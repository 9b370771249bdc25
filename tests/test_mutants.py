"""Every mutant is caught, each by exactly the clauses it breaks."""

from __future__ import annotations

import importlib

import pytest

from fakes.mutants import MUTANTS
from tests.conftest import run_suite

# Each runs whole suites in subprocesses with their own workers; see noxfile.py.
pytestmark = pytest.mark.suite


@pytest.mark.parametrize("name", MUTANTS)
def test_mutant_fails_exactly_the_clauses_it_breaks(name, tmp_path, builtin_host):
    module = importlib.import_module(f"fakes.mutants.{name}")
    scope = getattr(module, "SCOPE", None)
    run = run_suite("--backend", f"fakes.mutants.{name}:provider", "--fake", getattr(module, "FAKE", "tempdir"),
                    *(["-k", scope] if scope else []), "-W", "ignore::DeprecationWarning", cwd=tmp_path)
    assert run.report is not None, run.output[-3000:]
    assert run.report["certified"] is False, f"mutant {name} ({module.WHAT}) was certified"
    failed = run.failed()
    assert failed == set(module.BREAKS), (
        f"mutant {name} ({module.WHAT}): unexpected failures {sorted(failed - set(module.BREAKS))}, "
        f"missed {sorted(set(module.BREAKS) - failed)}"
    )
