"""The progress a conformance run shows: a live display per contract group on a terminal, a plain line
per completed group elsewhere, and every failing MUST clause at the end."""

from __future__ import annotations

import collections
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from conformance.progress import Tally, plain_line
from conformance.report.headline import must_failure_lines
from tests.conftest import run_suite

GROUP_LINE = re.compile(
    r"^(?P<group>[a-z]+)\s+(?P<done>\d+)/(?P<total>\d+) checks\s+pass (?P<passed>\d+) "
    r"fail (?P<failed>\d+) skip (?P<skipped>\d+)\s+\d+\.\d+s(?P<note>.*)$"
)
ANSI = re.compile(r"\x1b[\[\]()=>]")  # CSI, OSC, charset and keypad sequences: what a terminal would act on


def group_lines(output: str) -> dict[str, dict[str, int | str]]:
    found = {}
    for line in output.splitlines():
        match = GROUP_LINE.match(line)
        if match:
            row = match.groupdict()
            group, note = row.pop("group"), row.pop("note")
            found[group] = {**{k: int(v) for k, v in row.items()}, "note": note}
    return found


def checks_per_group(report: dict) -> dict[str, collections.Counter]:
    """{group: Counter(outcome)} of the checks the report records (each check cites one group's clauses)."""
    seen: dict[str, tuple[str, str]] = {}
    for clause in report["clauses"]:
        for check in clause["checks"]:
            seen[check["id"]] = (clause["group"], check["outcome"])
    out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for group, outcome in seen.values():
        out[group][outcome] += 1
    return out


def assert_lines_match_report(lines: dict, report: dict) -> None:
    expected = checks_per_group(report)
    assert set(lines) - {"all"} == set(expected), lines
    for group, counts in expected.items():
        total = sum(counts.values())
        assert lines[group] == {
            "done": total,
            "total": total,
            "passed": counts["passed"],
            "failed": counts["failed"],
            "skipped": counts["skipped"],
            "note": "",
        }, group
    everything = sum((c for c in expected.values()), collections.Counter())
    assert lines["all"]["done"] == lines["all"]["total"] == sum(everything.values())
    assert (lines["all"]["passed"], lines["all"]["failed"]) == (everything["passed"], everything["failed"])


# ------------------------------------------------------------------ the counting, without a run
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_group_completes_when_its_last_check_tears_down():
    clock = Clock()
    tally = Tally(["exec", "stdin"], clock=clock)
    tally.expect([("a.py::one", "exec"), ("a.py::two", "exec"), ("b.py::three", "stdin")])
    tally.start("a.py::one")
    clock.now += 2
    tally.start("a.py::two")
    assert tally.groups["exec"].slowest(clock.now) == ("a.py::one", 2.0)
    assert tally.report("a.py::one", "exec", "setup", "passed") is None
    assert tally.report("a.py::one", "exec", "call", "failed", "boom") is None
    first = tally.report("a.py::one", "exec", "teardown", "passed")
    assert first is not None and first.outcome == "failed" and first.reason == "boom" and not first.completed_group
    clock.now += 3
    tally.report("a.py::two", "exec", "setup", "skipped")
    last = tally.report("a.py::two", "exec", "teardown", "passed")
    assert last is not None and last.outcome == "skipped" and last.completed_group
    exec_ = tally.groups["exec"]
    assert (exec_.done, exec_.total, exec_.passed, exec_.failed, exec_.skipped) == (2, 2, 0, 1, 1)
    assert exec_.elapsed(clock.now + 50) == 5.0  # a completed group's time stops
    assert not tally.all_done and tally.totals() == (2, 3, 0, 1, 1)


def test_a_check_collected_under_a_guessed_group_moves_to_the_group_its_report_names():
    tally = Tally(["exec", "stdin"])
    tally.expect([("new.py::check", "other"), ("a.py::one", "exec")])
    tally.start("new.py::check", "stdin")
    assert (tally.groups["other"].total, tally.groups["stdin"].total) == (0, 1)
    assert [g.name for g in tally.rows()] == ["exec", "stdin"]


def test_a_crashed_workers_report_finishes_the_check_in_its_collected_group():
    tally = Tally(["exec"])
    tally.expect([("a.py::one", "exec")])
    tally.start("a.py::one")
    done = tally.report("a.py::one", None, "???", "failed", "worker 'gw0' crashed")
    assert done is not None and done.outcome == "failed" and done.completed_group and tally.all_done
    assert tally.report("a.py::one", None, "teardown", "passed") is None  # counted once


def test_a_second_workers_collection_does_not_double_the_totals():
    tally = Tally(["exec"])
    ids = [("a.py::one", "exec"), ("a.py::two", "exec")]
    tally.expect(ids)
    tally.expect(ids)
    assert tally.groups["exec"].total == 2


def test_plain_line_layout():
    assert plain_line("exec", 18, 18, 17, 1, 0, 12.34, 6) == "exec      18/18 checks  pass 17 fail 1 skip 0  12.3s"
    assert GROUP_LINE.match(plain_line("faults", 1, 9, 1, 0, 0, 1.0, 6, "(stopped)"))


def test_every_failing_must_clause_gets_one_line_however_many():
    clauses = [
        {"id": f"exec.c{i}", "level": "MUST", "verdict": "fail", "reason": f"check_{i}: first\n  second"}
        for i in range(40)
    ]
    clauses += [
        {"id": "exec.should", "level": "SHOULD", "verdict": "fail", "reason": "x"},
        {"id": "exec.long", "level": "MUST", "verdict": "fail", "reason": "y" * 1000},
        {"id": "exec.ok", "level": "MUST", "verdict": "pass"},
    ]
    lines = must_failure_lines({"clauses": clauses})
    assert len(lines) == 41
    assert lines[0] == "MUST fail exec.c0: check_0: first second"
    assert lines[-1].startswith("MUST fail exec.long: yyy") and lines[-1].endswith("...") and len(lines[-1]) < 330
    assert all("\n" not in line for line in lines)


def test_live_with_v_is_refused_in_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "conformance.checks",
            "-p",
            "no:cacheprovider",
            "--progress=live",
            "-v",
            "--co",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--progress=live draws one line per contract group" in proc.stderr


# ------------------------------------------------------------------ real runs
@pytest.mark.suite
def test_plain_progress_under_xdist_counts_each_group(tmp_path):
    run = run_suite(
        "--backend", "tempdir_box", "-k", "test_cwd or test_errors", "-W", "ignore::DeprecationWarning", cwd=tmp_path
    )
    assert run.returncode == 0 and run.report is not None, run.output[-3000:]
    lines = group_lines(run.output)
    assert {"cwd", "errors", "all"} <= set(lines), run.output[-3000:]
    assert_lines_match_report(lines, run.report)
    assert not ANSI.search(run.output), "plain progress wrote control sequences"
    # pytest's dots stay out: no line of the output is made of result letters only
    assert not [line for line in run.output.splitlines() if line.strip() and set(line.strip()) <= set(".sFE")]
    assert "hermes-backend-kit: verdicts per group" in run.output


@pytest.mark.suite
def test_plain_progress_without_xdist_shows_the_failing_group_and_every_failing_must(tmp_path):
    run = run_suite(
        "--backend",
        "fakes.mutants.output_cap:provider",
        "--fake",
        "tempdir",
        "-k",
        "test_output",
        "-W",
        "ignore::DeprecationWarning",
        cwd=tmp_path,
        workers=0,
    )
    assert run.report is not None, run.output[-3000:]
    lines = group_lines(run.output)
    assert lines["output"]["failed"] == 1 and lines["output"]["done"] == lines["output"]["total"], lines
    assert_lines_match_report(lines, run.report)
    failing = [c["id"] for c in run.report["clauses"] if c["verdict"] == "fail" and c["level"] == "MUST"]
    assert "output.full-fidelity" in failing
    for cid in failing:
        assert re.search(rf"^  MUST fail {re.escape(cid)}: \S", run.output, re.MULTILINE), cid
    progress_text = "\n".join(line for line in run.output.splitlines() if GROUP_LINE.match(line))
    assert not ANSI.search(progress_text)


def _run_on_a_terminal(
    args: list[str],
    cwd: Path,
    timeout: float = 600,
    *,
    program: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> tuple[int, str]:
    """Run ``python -m pytest ARGS`` (or ``PROGRAM ARGS``) with a pseudo-terminal (120x40) as its stdout and
    stderr; its output and status."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "TEMPDIR_BOX_", "HERMES_")) and k not in ("CI", "NO_COLOR")
    }
    env["TERM"] = "xterm-256color"
    env.update(extra_env or {})
    proc = subprocess.Popen(
        [*(program or (sys.executable, "-m", "pytest")), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        returncode = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return returncode, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.suite
def test_live_progress_on_a_terminal_draws_groups_and_gives_the_cursor_back(tmp_path):
    returncode, output = _run_on_a_terminal(
        [
            "--pyargs",
            "conformance.checks",
            "-p",
            "no:cacheprovider",
            "--backend",
            "tempdir_box",
            "-n",
            "2",
            "-k",
            "test_cwd or test_identity",
            "-W",
            "ignore::DeprecationWarning",
        ],
        tmp_path,
    )
    assert returncode == 0, output[-3000:]
    hide, show = output.rfind("\x1b[?25l"), output.rfind("\x1b[?25h")
    assert hide != -1, "no live display was drawn (it hides the cursor while it runs)"
    assert show > hide, "the cursor was left hidden"
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)
    assert "slowest running" in plain
    table_start = plain.rfind("slowest running")
    final = plain[table_start : plain.index("verdicts per group", table_start)]
    rows = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(r"^([a-z]+)\s+(\d+)/(\d+)", final, re.M)}
    assert {"cwd", "identity", "all"} <= set(rows) and all(done == total for done, total in rows.values()), final
    assert re.search(r"\d+ passed", plain[table_start:])  # pytest's summary follows the display


@pytest.mark.suite
def test_certify_on_a_terminal_shows_the_live_display(tmp_path):
    """certify relays its run through a pipe; on a terminal it still asks the run for the live display."""
    returncode, output = _run_on_a_terminal(
        ["certify", "--backend", "tempdir_box", "--select", "identity", "--out", str(tmp_path / "out")],
        tmp_path,
        program=(sys.executable, "-c", "import sys; from conformance.cli import main; sys.exit(main())"),
    )
    assert returncode == 0, output[-3000:]  # a diagnostic run whose clauses pass
    hide, show = output.rfind("\x1b[?25l"), output.rfind("\x1b[?25h")
    assert hide != -1, "certify on a terminal drew no live display"
    assert show > hide, "the cursor was left hidden"
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output)
    assert re.search(r"^identity\s+3/3", plain, re.M), plain[-3000:]
    assert "DIAGNOSTIC (--select identity" in plain
