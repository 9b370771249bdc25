"""The bench's network section: its shape, its arithmetic and the calls it traces (never its speed)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conformance.backends import KNOWN_BACKENDS
from conformance.bench import cli, goals, network
from conformance.errors import UsageError

TINY = network.Rounds(cold=1, warm=2, session=1, sync=1, execute_code=1)


def _args(**given):
    defaults = {"rtt": None, "quick": False, "network_only": False}
    return type("Args", (), {**defaults, **given})()


def test_round_trip_times_parse_default_and_refuse_what_is_not_one():
    assert cli._rtts(_args()) == [goals.NETWORK_RTT_MS]
    assert cli._rtts(_args(quick=True)) == []
    assert cli._rtts(_args(quick=True, network_only=True)) == [goals.NETWORK_RTT_MS]
    assert cli._rtts(_args(rtt="0, 20,50,20")) == [0.0, 20.0, 50.0]
    for bad in ("fast", "-5", "20,", "100000"):
        with pytest.raises(UsageError, match="round-trip time in milliseconds"):
            cli._rtts(_args(rtt=bad))


def test_a_run_without_a_vendor_fake_is_told_what_to_name(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.bench",
            "--network-only",
            "--backends",
            "tempdir_box",
            "--out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "none of these is" in proc.stderr and "--reference deepinfra" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def _entry(ms: float | None, calls: list[str], minimal_ms: float | None, minimal_calls: list[str]) -> dict:
    def figures(value):
        return {k: {"ms": value} for k in ("cold_start", "warm_p50")}

    return {
        "figures": figures(ms),
        "minimal": {"label": "minimal", "figures": figures(minimal_ms)},
        "calls": {
            "warm": {
                "calls": calls,
                "minimal_calls": minimal_calls,
                "beyond_minimal": {c: 1 for c in calls if c not in minimal_calls},
            }
        },
    }


def test_targets_at_fifty_milliseconds_read_ratios_and_calls_beyond_the_minimal_client():
    exec_call, status = "POST /v1/sandboxes/{id}/exec", "GET /v1/sandboxes/{id}"
    section = {
        "by_rtt": {
            "50": {
                "deepinfra": _entry(104.0, [exec_call], 100.0, [exec_call]),
                "slow": _entry(160.0, [status, exec_call], 100.0, [exec_call]) | {"reference": "deepinfra"},
                "tempdir_box": {"na": "no network"},
            }
        }
    }
    found = goals.network(section)
    assert set(found) == {"deepinfra", "slow"}
    mine = found["deepinfra"]["checks"]
    assert mine["warm_vs_minimal"]["met"] and mine["warm_vs_minimal"]["value"] == 1.04
    assert mine["warm_calls_beyond_minimal"] == {"value": 0.0, "limit": 0.0, "met": True}
    slow = found["slow"]["checks"]
    assert slow["warm_vs_minimal"]["met"] is False and slow["warm_calls_beyond_minimal"]["met"] is False
    assert slow["reference_warm_vs_this"]["value"] == 0.65 and slow["reference_warm_vs_this"]["met"]
    assert goals.network({"by_rtt": {"20": section["by_rtt"]["50"]}}) == {}, "targets are read at 50 ms only"


@pytest.mark.skipif(KNOWN_BACKENDS["deepinfra"].missing_extra() is not None, reason="needs the deepinfra SDK")
def test_deepinfra_makes_its_vendors_fewest_calls_per_warm_command_and_to_its_first_result(tmp_path):
    """Every operation runs on both sides; a warm command is one exec, as the minimal client's, and the cold
    start makes no call beyond the minimal client's (its first sync rides on the session bootstrap)."""
    from conformance.bench.entries import known

    lines: list[str] = []
    section = network.run([known("deepinfra")], [0.0], TINY, tmp_path, lambda *a: lines.append(" ".join(a)))
    entry = section["by_rtt"]["0"]["deepinfra"]
    assert {k for k, v in entry["figures"].items() if v["ms"] is None} == set(), entry["figures"]
    assert {k for k, v in entry["minimal"]["figures"].items() if v["ms"] is None} == set(), lines
    warm = entry["calls"]["warm"]
    assert warm["calls"] == ["POST /v1/sandboxes/{id}/exec"] and warm["beyond_minimal"] == {}, warm
    assert entry["calls"]["cold_start"]["beyond_minimal"] == {}, entry["calls"]["cold_start"]
    json.dumps(section)  # results.json takes it as it is
