"""Fault checks' shared tools: commands that count their own runs, and Hermes's terminal call.

A fault check runs its command the way Hermes's terminal tool does
(``drivers.terminal``: an exception from execute() is retried up to three
times, or read as exit 124 when its text says "timeout"), so a backend that
raises after a command may have started makes the command run again, as it
would under real Hermes.  The command appends one byte to a record under
$HOME each time it starts; ``count_runs`` reads the record back through two
channels, the harness's world (the fake's own view of the sandbox) and the
backend, and waits a bounded time: a correct service may still be busy with
a command whose stream was cut when the check starts reading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from conformance.checks._support import nonce, out, rc, run
from conformance.host.calls import CallHung
from conformance.host.drivers import TerminalOutcome, TerminalSession, terminal

READBACK_S = 5.0  # how long a check waits for the record to show the runs it expects
SETTLE_S = 0.5  # then how long it waits for a late extra run before the final read
MOST_RUNS = 16  # more runs than this are reported as this many (Hermes makes at most 4 attempts)


def counting(label: str, body: str) -> tuple[str, str]:
    """``body`` preceded by a line that records each start of the command; and the record's name under $HOME."""
    record = f".kit-runs-{nonce(label)}"
    return f'printf x >> "$HOME"/{record}; {body}', record


@dataclass
class RunCount:
    runs: int
    notes: list[str] = field(default_factory=list)  # why a read back through the backend failed

    def explain(self) -> str:
        return f" (reading the record through the backend failed: {'; '.join(self.notes[-2:])})" if self.notes else ""


def _in_world(kit: Any, record: str) -> int:
    world = kit.world
    if world is None:
        return 0
    return next((n for n in range(MOST_RUNS, 0, -1) if world.locate(record, "x" * n) is not None), 0)


def _through_backend(env: Any, record: str, notes: list[str]) -> int:
    try:
        result = run(env, f'cat "$HOME"/{record} 2>/dev/null || true', timeout=5)
    except CallHung as exc:
        notes.append(str(exc))
        return 0
    except Exception as exc:
        notes.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        return 0
    if rc(result) != 0:
        notes.append(f"returncode {rc(result)}: {out(result)[-200:]!r}")
        return 0
    return out(result).count("x")


def count_runs(kit: Any, env: Any, record: str, *, expect: int) -> RunCount:
    """How many times the counting command started, in any sandbox the world or ``env`` can show.

    Reads until ``expect`` runs show or READBACK_S passes, then once more after
    SETTLE_S so a run that arrives late is counted too.
    """
    notes: list[str] = []

    def read() -> int:
        seen = _in_world(kit, record)
        return seen if seen >= max(expect, 1) else max(seen, _through_backend(env, record, notes))

    deadline = time.monotonic() + READBACK_S
    runs = read()
    while runs < expect and time.monotonic() < deadline:
        time.sleep(0.2)
        runs = max(runs, read())
    time.sleep(SETTLE_S)
    return RunCount(max(runs, read()), notes)


def drive(env: Any, command: str, *, timeout: int) -> TerminalOutcome:
    """``command`` through Hermes's terminal tool; a hung attempt fails the check."""
    try:
        return terminal(env, command, TerminalSession(), timeout=timeout)
    except CallHung as exc:
        raise AssertionError(f"{exc}: the backend must give up within that budget") from None


def describe(outcome: TerminalOutcome) -> str:
    """What Hermes's terminal tool made of the call, attempt by attempt."""
    tail = outcome.output[-200:] if outcome.output else ""
    said = f"exit code {outcome.exit_code} with output {tail!r}"
    if outcome.error:
        said = f"exit code {outcome.exit_code} with error {outcome.error[:200]!r}"
    if not outcome.raised:
        return f"execute() returned {said}"
    raises = "; ".join(r[:200] for r in outcome.raised)
    return (
        f"execute() raised {len(outcome.raised)} time(s) ({raises}), so Hermes's terminal tool made "
        f"{outcome.attempts} attempt(s) and reported {said}"
    )
