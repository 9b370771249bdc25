"""conformance/schedule.py: checks run longest first, handed to xdist workers one at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance import check_costs, schedule
from tests.conftest import run_suite


def test_the_order_is_cost_descending_ties_in_collection_order_unknown_at_the_median(monkeypatch):
    table = {"a.py::slow": 9.0, "a.py::mid": 1.0, "b.py::fast": 0.1, "b.py::also_fast": 0.1}
    monkeypatch.setattr(schedule, "expected", lambda: table)
    ids = ["conformance/checks/b.py::fast", "x/a.py::mid", "a.py::new", "b.py::also_fast", "a.py::slow"]
    order = [ids[i] for i in schedule.longest_first(ids)]
    # the unknown check counts as the median (0.55): after mid (1.0), before the two fast ones (in their order)
    assert order == ["a.py::slow", "x/a.py::mid", "a.py::new", "conformance/checks/b.py::fast", "b.py::also_fast"]


def test_a_check_name_keeps_a_parameter_with_slashes():
    nodeid = "conformance/checks/test_errors.py::test_failing_commands_return_results[cat /kit/does/not/exist]"
    assert (
        schedule.check_name(nodeid) == "test_errors.py::test_failing_commands_return_results[cat /kit/does/not/exist]"
    )


def test_the_table_is_each_checks_largest_wall_time_over_the_runs(tmp_path):
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_text(json.dumps({"check": "t.py::a", "wall_s": 2.0, "cpu_s": 0, "envs": 1, "worker": "gw0"}) + "\n")
    two.write_text(
        json.dumps({"check": "t.py::a", "wall_s": 0.5, "cpu_s": 0, "envs": 1, "worker": "gw1"})
        + "\n"
        + json.dumps({"check": "t.py::b", "wall_s": 0.25, "cpu_s": 0, "envs": 1, "worker": "gw1"})
        + "\n"
    )
    assert schedule.measured([one, two]) == {"t.py::a": 2.0, "t.py::b": 0.25}


def test_the_shipped_table_names_only_checks_that_exist():
    manifest = json.loads((Path(schedule.__file__).parent / "checks.manifest.json").read_text())
    known = {name.split("[")[0] for name in manifest["checks"]}
    stale = sorted(name for name in schedule.expected() if name.split("[")[0] not in known)
    assert schedule.expected() and not stale, f"conformance/costs.json names checks that are gone: {stale}"


@pytest.mark.suite
def test_the_two_longest_checks_start_first_one_on_each_worker(tmp_path):
    """Collected last (test_faults, test_kernel after test_exec), the two longest checks still start the run,
    one per worker; xdist's own scheduling would hand each worker a block of the test_exec checks first."""
    costs = tmp_path / "costs.jsonl"
    longest = {
        "test_faults.py::test_sandbox_deleted_mid_command_fails_it_once",
        "test_kernel.py::test_detached_kernel_keeps_its_state_across_calls",
    }
    assert all(schedule.expected()[name] > 2 for name in longest), "the table no longer ranks these two first"
    run = run_suite(
        "--backend",
        "tempdir_box",
        "-k",
        "test_exec and returncode or sandbox_deleted_mid_command or detached_kernel_keeps",
        "--kit-check-costs",
        str(costs),
        cwd=tmp_path,
        workers=2,
        timeout=300,
    )
    assert run.report is not None, run.output[-3000:]
    lines = check_costs.read(costs)
    first: dict[str, str] = {}
    for line in lines:  # each worker appends its checks in the order it ran them
        first.setdefault(line["worker"], line["check"])
    assert len(lines) >= 6 and set(first) == {"gw0", "gw1"}, lines
    assert set(first.values()) == longest, f"the workers started with {first}, not the two longest checks"
