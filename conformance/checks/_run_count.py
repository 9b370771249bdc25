"""Fault checks' shared tools: commands that count their own runs, and Hermes's terminal call.

A fault check runs its command the way Hermes's terminal tool does
(``drivers.terminal``: an exception from execute() is retried up to three
times, or read as exit 124 when its text says "timeout"), so a backend that
raises after a command may have started makes the command run again, as it
would under real Hermes.  The command appends one byte to a record each time
it starts.  The record lives in the directory the backend keeps
(conformance.persistent_path: the declared persistent path, else the
environment's cwd), never $HOME or /tmp, so a backend that resets those
(a stop on a timeout) is judged for that by the clauses about it, not here;
the check makes the record empty before the command, so a record that is
gone afterwards says the sandbox lost its files.  ``count_runs`` reads it
back through two channels, the harness's world (every sandbox of the fake,
replacements included) and the backend, and waits a bounded time: a correct
service may still be busy with a command whose stream was cut when the check
starts reading.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from conformance import persistent_path
from conformance.checks._support import nonce, out, rc, run
from conformance.host.calls import CallHung
from conformance.host.drivers import TerminalOutcome, TerminalSession, terminal
from conformance.persistent_path import PersistentPath

READBACK_S = 5.0  # how long a check waits for the record to show the runs it expects
SETTLE_S = 0.5  # then how long it waits for a late extra run before the final read
MOST_RUNS = 16  # more runs than this are reported as this many (Hermes makes at most 4 attempts)
PRESENT = "kit-record:"
ABSENT = "kit-absent"


@dataclass(frozen=True)
class Record:
    """A check's run record: a file named with a nonce in the directory the backend keeps."""

    name: str
    where: PersistentPath

    def shell(self) -> str:
        return self.where.file(self.name)


def counting(kit: Any, env: Any, label: str, body: str) -> tuple[str, Record]:
    """``body`` preceded by a line that records each start of the command, and its record (made empty now)."""
    where = persistent_path.of(kit, env)
    record = Record(f".kit-runs-{nonce(label)}", where)
    made = run(env, f"mkdir -p {where.shell()} && : > {record.shell()}")
    assert rc(made) == 0, (
        f"could not make the check's run record in {where.describe()}: returncode {rc(made)}, {out(made)[-200:]!r}"
    )
    # A re-run in a replacement sandbox records itself there too: the directory may need making first.
    return f"mkdir -p {where.shell()} 2>/dev/null; printf x >> {record.shell()}; {body}", record


@dataclass
class RunCount:
    runs: int
    notes: list[str] = field(default_factory=list)  # why a read back through the backend failed
    gone: str = ""  # set when no channel found the record at all: where it was

    def explain(self) -> str:
        if self.gone:
            return (
                f" (the record the check made in {self.gone} before the command is gone from every sandbox: the "
                "sandbox lost its files during the command, so the backend stopped, reset or replaced it)"
            )
        return f" (reading the record through the backend failed: {'; '.join(self.notes[-2:])})" if self.notes else ""


def started_in(kit: Any, record: Record) -> str | None:
    """The sandbox (world id) whose record shows a start of the command, if any yet."""
    found = kit.world.find_record(record.name, record.where.path)
    return next((sid for sid, text in sorted(found.items()) if "x" in text), None)


def _in_world(kit: Any, record: Record, exclude: frozenset[str] = frozenset()) -> int | None:
    """Runs recorded in every sandbox the world shows but ``exclude``; None when none of them holds the record."""
    world = kit.world
    if world is None:
        return None
    found = {sid: text for sid, text in world.find_record(record.name, record.where.path).items() if sid not in exclude}
    if not found:
        return None
    return min(MOST_RUNS, sum(text.count("x") for text in found.values()))


def _through_backend(env: Any, record: Record, notes: list[str]) -> int | None:
    """Runs recorded in ``env``'s sandbox; None when the record is not there (or the backend cannot say)."""
    path = record.shell()
    try:
        result = run(env, f"if [ -f {path} ]; then printf {PRESENT}; cat {path}; else echo {ABSENT}; fi", timeout=5)
    except CallHung as exc:
        notes.append(str(exc))
        return None
    except Exception as exc:
        notes.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        return None
    text = out(result)
    if rc(result) != 0 or PRESENT not in text:
        if ABSENT not in text:
            notes.append(f"returncode {rc(result)}: {text[-200:]!r}")
        return None
    return text.split(PRESENT, 1)[1].count("x")


def count_runs(kit: Any, env: Any, record: Record, *, expect: int, exclude: frozenset[str] = frozenset()) -> RunCount:
    """How many times the counting command started, in any sandbox the world or ``env`` can show
    (``exclude``: sandboxes whose runs do not count, such as one the check deleted after its run).

    Reads until ``expect`` runs show or READBACK_S passes, then once more after
    SETTLE_S so a run that arrives late is counted too.
    """
    notes: list[str] = []
    seen_anywhere = False

    def read() -> int:
        nonlocal seen_anywhere
        world = _in_world(kit, record, exclude)
        if world is not None:
            seen_anywhere = True
            if world >= max(expect, 1):
                return world
        backend = _through_backend(env, record, notes)
        seen_anywhere = seen_anywhere or backend is not None
        return max(world or 0, backend or 0)

    deadline = time.monotonic() + READBACK_S
    runs = read()
    while runs < expect and time.monotonic() < deadline:
        time.sleep(0.2)
        runs = max(runs, read())
    time.sleep(SETTLE_S)
    runs = max(runs, read())
    return RunCount(runs, notes, gone="" if seen_anywhere else record.where.describe())


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
