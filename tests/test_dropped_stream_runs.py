"""A command whose stream drops after it started runs once under Hermes's retry loop.

Each reference backend of a vendor service runs against its own fake; the fake cuts the exec
stream after 2 KiB of output, while the command (which records every start
of itself under $HOME) is still running.  The command goes through the
mini-host's terminal driver, which re-runs a command after execute() raises,
as Hermes's terminal tool does.  A backend that reports the lost stream as a
result runs it once; the raises_after_start mutant, which raises instead,
makes the driver run it again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance import backends
from conformance.checks._run_count import count_runs, counting, describe, drive
from conformance.checks._support import rc, run
from conformance.run import KitRun, RunOptions

COMMAND = "head -c 4096 /dev/zero | tr '\\0' s; echo; sleep 1; echo finished; exit 7"
MUTANT = "fakes.mutants.raises_after_start:provider"


@pytest.fixture
def kit_for(tmp_path: Path) -> Iterator:
    """Start a KitRun (backend on its fake, builtin host); the process environment is restored afterwards."""
    started: list[KitRun] = []
    before = dict(os.environ)

    def start(backend: str, fake: str | None = None) -> KitRun:
        kit = KitRun.start(RunOptions(backend=backend, fake=fake, host="builtin"), tmp_path / f"kit-{len(started)}")
        started.append(kit)
        return kit

    try:
        yield start
    finally:
        for kit in started:
            kit.close()
        os.environ.clear()
        os.environ.update(before)


def _runs_after_dropped_stream(kit: KitRun) -> tuple[int, str]:
    env = kit.create()
    assert rc(run(env, "true")) == 0, "a plain command failed before the fault was armed"
    command, record = counting(kit, env, "dropped", COMMAND)
    armed = kit.world.faults.arm("drop", "exec", after_bytes=2048)
    try:
        outcome = drive(env, command, timeout=10)
    finally:
        kit.world.faults.clear()
    assert armed.fired >= 1, "the drop fault never fired: the fake's exec routes are wrong"
    return count_runs(kit, env, record, expect=1).runs, describe(outcome)


@pytest.mark.parametrize("backend", backends.SERVICE_BACKENDS)
def test_reference_backend_runs_a_dropped_command_once(kit_for, backend):
    runs, what = _runs_after_dropped_stream(kit_for(backend))
    assert runs == 1, f"{backend}: the command ran {runs} time(s) after its stream dropped: {what}"


def test_a_backend_that_raises_after_start_makes_hermes_run_it_again(kit_for):
    runs, what = _runs_after_dropped_stream(kit_for(MUTANT, "upstash"))
    assert runs > 1, f"raises_after_start: the command ran {runs} time(s); the retry loop did not re-run it: {what}"
