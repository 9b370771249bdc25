"""Every mutant is caught, each by exactly the clauses it breaks."""

from __future__ import annotations

import importlib

import pytest

from fakes.mutants import MUTANTS
from tests.conftest import run_suite

# Each runs a suite in a subprocess; see noxfile.py.
pytestmark = pytest.mark.suite

# Scopes with a minute or more of checks, or checks that mostly wait (timeouts, silent or slow services:
# the transport-fault mutants), run on two workers.  The others run in one process: two workers, each
# loading the backend and starting its own fake, cost more than their checks take (measured: half the
# CPU time, and as fast or faster on two cores).
TWO_WORKERS = frozenset(
    {
        "exit_code_key",
        "stdin_never_closed",
        "no_group_kill",
        "leaves_processes",
        "output_cap",
        "stops_sandbox_on_timeout",
        "wipes_home_on_timeout",
        "kernel_runner_killed",
        "resends_commands",
        "no_rate_limit_retry",
        "blocking_finalizer",
        "open_without_deadline",
        "raises_after_start",
        "timeout_word_in_error",
    }
)


@pytest.mark.parametrize("name", MUTANTS)
def test_mutant_fails_exactly_the_clauses_it_breaks(name, tmp_path, builtin_host):
    module = importlib.import_module(f"fakes.mutants.{name}")
    scope = getattr(module, "SCOPE", None)
    run = run_suite(
        "--backend",
        f"fakes.mutants.{name}:provider",
        "--fake",
        getattr(module, "FAKE", "tempdir"),
        *(["-k", scope] if scope else []),
        "-W",
        "ignore::DeprecationWarning",
        cwd=tmp_path,
        workers=2 if name in TWO_WORKERS else 0,
    )
    assert run.report is not None, run.output[-3000:]
    assert run.report["certified"] is False, f"mutant {name} ({module.WHAT}) was certified"
    failed = run.failed()
    assert failed == set(module.BREAKS), (
        f"mutant {name} ({module.WHAT}): unexpected failures {sorted(failed - set(module.BREAKS))}, "
        f"missed {sorted(set(module.BREAKS) - failed)}"
    )
