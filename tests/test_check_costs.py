"""Each check's cost (conformance/check_costs.py) and the bench's suite figures (conformance/bench/suite.py).

The accounting rules are pinned on made-up process records; one real, narrowed
suite run shows that every check that ran gets a line and that CPU spent in a
child process (a command of the backend) is counted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from conformance import check_costs
from conformance.bench import suite
from conformance.bench.suite import Sampler, _Seen, kind_of
from tests.conftest import run_suite


@pytest.mark.parametrize(
    ("cmdline", "kind"),
    [
        (b"/v/bin/python3\0-I\0-S\0/x/isolation/box_init.py\0--forks\x0012", "box world"),
        (b"/v/bin/python3\0-I\0-S\0-c\0import sys; from reference.box_lite.daemon import run; run()", "box world"),
        (b"/v/bin/python3\0-m\0fakes.process\0upstash\0--root\0/t", "fake server"),
        (b"/v/bin/python3\0-u\0-c\0import sys;exec(eval(sys.stdin.readline()))", "workers"),
        (b"/v/bin/python3\0-m\0pytest\0--pyargs\0conformance.checks", "kit"),
        (b"/v/bin/python3\0/v/bin/hermes-backend-kit\0certify", "kit"),
        (b"python3\0kernel_runner.py\x00120", "helpers"),
        (b"bash\0-c\0true", "commands"),
        (b"", "commands"),
    ],
)
def test_processes_are_told_apart_by_their_command_line(cmdline: bytes, kind: str) -> None:
    assert kind_of(cmdline) == kind


def test_cpu_of_unseen_children_goes_to_the_kind_of_their_siblings() -> None:
    sampler = Sampler(root=1)
    sampler.seen = {
        10: _Seen("workers", parent=1, own=5.0, reaped=3.0),  # reaped 3 s: 1 s of it a child seen, 2 s unseen
        11: _Seen("commands", parent=10, own=0.8, reaped=0.2, alive=False),
        20: _Seen("fake server", parent=10, own=2.0, reaped=0.5),  # 0.5 s of box processes never seen
    }
    by_kind = sampler.by_kind(total=11.0)
    assert by_kind["workers"] == 5.0
    assert by_kind["commands"] == pytest.approx(0.8 + 0.2 + 2.0)  # its own, what it reaped, its unseen siblings
    assert by_kind["fake server"] == 2.0 and by_kind["box world"] == 0.5
    assert by_kind["unattributed"] == pytest.approx(11.0 - 10.5)


def test_a_chain_ended_after_its_last_sample_is_charged_once() -> None:
    """A box's set-up, namespace and init processes end together, after their last samples: the fork
    server's reaped time holds the commands the init reaped, which the init's own record already shows."""
    sampler = Sampler(root=1)
    sampler.seen = {
        5: _Seen("box world", parent=1, own=0.5, reaped=2.4),  # the fork server, after the box ended
        6: _Seen("box world", parent=5, own=0.1, reaped=0.0, alive=False),  # set-up: its child was alive
        7: _Seen("box world", parent=6, own=0.1, reaped=0.0, alive=False),  # namespace process
        8: _Seen("box world", parent=7, own=0.2, reaped=2.0, alive=False),  # the init: 2 s of commands
    }
    by_kind = sampler.by_kind(total=2.9)
    assert by_kind["box world"] == pytest.approx(0.9) and by_kind["commands"] == pytest.approx(2.0)
    assert by_kind["unattributed"] == pytest.approx(0.0)


def test_tree_cpu_counts_children_reaped_and_alive() -> None:
    before = check_costs.tree_cpu(os.getpid())
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", busy], check=True)  # reaped: in this process's children time
    alive = subprocess.Popen([sys.executable, "-c", busy + "\nimport time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 20
        while check_costs.tree_cpu(os.getpid()) - before < 0.55 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert check_costs.tree_cpu(os.getpid()) - before >= 0.55
    finally:
        alive.kill()
        alive.wait()


def test_markdown_has_a_row_and_the_costliest_checks_per_backend() -> None:
    figures = {
        "workers": 2,
        "wall_s": 12.5,
        "cpu_s": 18.0,
        "cpu_by_kind_s": {**dict.fromkeys(suite.KINDS, 1.0), "unattributed": 0.2},
        "load_average_1m": {"start": 0.1, "end": 1.9},
        "checks": 164,
        "environments": 150,
        "cpu_per_check_s": 0.11,
        "checks_cpu_s": 15.0,
        "most_expensive": [{"check": "test_faults.py::test_flood", "cpu_s": 2.5, "wall_s": 2.0, "envs": 1}],
        "returncode": 0,
        "verdict": "CERTIFIED (full profile)",
    }
    text = "\n".join(suite.markdown({"suite": {"tempdir_box": figures}}))
    assert "| tempdir_box | 2 | 12.5 | 18.0 |" in text and "0.10-1.90" in text
    assert "`test_flood` 2.50 s CPU" in text
    assert suite.markdown({}) == []


@pytest.mark.suite
def test_a_run_writes_one_line_per_check_with_its_cost(tmp_path) -> None:
    costs = tmp_path / "costs.jsonl"
    run = run_suite(
        "--backend",
        "tempdir_box",
        "-k",
        "test_exec and returncode or test_eight_mib_of_output_in_full",
        "--kit-check-costs",
        str(costs),
        cwd=tmp_path,
        workers=0,
        timeout=300,
    )
    assert run.report is not None, run.output[-3000:]
    lines = check_costs.read(costs)
    ran = {o["check"] for o in run.report["checks"]} if "checks" in run.report else None
    assert lines and all(line["worker"] == "main" and line["wall_s"] > 0 for line in lines)
    if ran is not None:
        assert {line["check"] for line in lines} >= ran
    flood = next(line for line in lines if "eight_mib" in line["check"])
    assert flood["envs"] >= 1 and flood["cpu_s"] > 0.05, flood  # 8 MiB through bash and the host


def test_a_process_that_ended_during_a_check_takes_nothing_from_it() -> None:
    """A process alive at the start and reaped outside the tree by the end (a daemon's child adopted by init)
    leaves the tree: the check's CPU is the others' growth, never negative; a pid reused by a new process
    counts as new."""
    before = {(10, 100): (5.0, None), (11, 100): (3.0, (1, 0)), (12, 100): (1.0, (1, 0))}
    after = {(10, 100): 5.5, (12, 400): 0.25}  # 11 ended, init reaped it; pid 12 is a new process now
    assert check_costs.grown(before, after) == pytest.approx(0.75)


def test_a_process_reaped_during_a_check_counts_only_what_it_used_during_it() -> None:
    """The fake's process, stopped at the last check's teardown, had used 5 s before that check: its
    parent's figure jumps by its whole life when it is reaped, and only its 0.2 s of this check count
    (with the parent's own 0.1 s)."""
    parent, fake = (100, 7), (101, 8)
    before = {parent: (1.0, None), fake: (5.0, parent)}
    after = {parent: 1.0 + 0.1 + 5.2}  # its own 0.1 s more, and the fake's 5.2 s reaped
    assert check_costs.grown(before, after) == pytest.approx(0.3)


def test_every_process_is_snapshot_with_its_parent() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        snapshot = check_costs.all_cpus()
        mine = [key for key in snapshot if key[0] == os.getpid()]
        theirs = [value for key, value in snapshot.items() if key[0] == child.pid]
        assert len(mine) == 1 and len(theirs) == 1 and theirs[0][1] == mine[0]
    finally:
        child.kill()
        child.wait()
