"""The benchmark's output shape and arithmetic (never its speed): a tiny quick run on tempdir_box."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.bench import cli, growth, report
from conformance.bench.measure import parse_size

ROOT = Path(__file__).resolve().parents[1]
FIGURES = {"cold_start_ms", "rtt_p50_ms", "rtt_p95_ms", "output_bounded_mib_s", "output_full_mib_s",
           "rss_bounded_mib", "rss_full_mib", "stdin_mib_s", "sync_push_s", "sync_back_s", "suite_s"}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    proc = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-m", "conformance.bench", "--quick",
         "--backends", "tempdir_box", "--skip-suite", "--sizes", "1K,8K", "--stream-size", "64K",
         "--stdin-size", "64K", "--sync-files", "5", "--sync-big-size", "64K", "--concurrency", "1,2",
         "--per-call-size", "16K", "--rounds", "3", "--cold-samples", "1", "--world-rounds", "5", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text()), out.with_suffix(".md").read_text()


def test_results_shape(results):
    data, markdown = results
    assert data["schema"] == report.SCHEMA and data["baseline"] == "local"
    assert set(data["figures"]) == FIGURES
    assert list(data["targets"]) == ["local", "tempdir_box"]
    for target in data["targets"].values():
        assert set(target["figures"]) == FIGURES
        for key, figure in target["figures"].items():
            assert (figure["value"] is None) == ("na" in figure), (key, figure)
        assert set(target["growth"]) == {"output_bounded", "output_full", "concurrency"}
        sizes = target["growth"]["output_bounded"]
        assert [p["bytes"] for p in sizes["points"]] == [1024, 8192]
        assert set(sizes["fits"]) == {"latency", "memory"}
        assert "slope" in sizes["fits"]["latency"] and "departs_at" in sizes["fits"]["latency"]
        assert [p["n"] for p in target["growth"]["concurrency"]["points"]] == [1, 2]
    suite = data["targets"]["tempdir_box"]["figures"]["suite_s"]
    assert suite["value"] is None and "skip" in suite["na"]
    assert "| figure | local bash -c (baseline) | tempdir_box |" in markdown and "## Growth" in markdown


def test_the_world_figure_is_recorded(results):
    data, markdown = results
    world = data["world"]
    assert set(world) == {"spawn_p50_ms", "bash_c_p50_ms", "ratio"}
    assert world["spawn_p50_ms"] > 0 and world["bash_c_p50_ms"] > 0
    assert world["ratio"] == pytest.approx(world["spawn_p50_ms"] / world["bash_c_p50_ms"], rel=1e-2)
    assert data["world_detail"]["rounds"] == 5
    assert "## Box world" in markdown and "spawn-to-exit of `true`, p50" in markdown


def test_world_only_updates_just_the_world_figure(results, tmp_path):
    data, _ = results
    out = tmp_path / "results.json"
    out.write_text(json.dumps({**data, "world": {"spawn_p50_ms": -1.0, "bash_c_p50_ms": -1.0, "ratio": -1.0}}))
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-m", "conformance.bench",
                           "--world-only", "--world-rounds", "3", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    updated = json.loads(out.read_text())
    assert updated["world"]["ratio"] > 0 and updated["world_detail"]["rounds"] == 3
    assert {k: v for k, v in updated.items() if not k.startswith("world")} == \
        {k: v for k, v in data.items() if not k.startswith("world")}
    assert out.with_suffix(".md").read_text() == report.to_markdown(updated)


def test_ratios_are_against_the_baseline(results):
    data, _ = results
    base = data["targets"]["local"]["figures"]
    for name, target in data["targets"].items():
        for key, figure in target["figures"].items():
            if figure["value"] is None or base[key]["value"] is None:
                assert figure["ratio"] is None
                continue
            floor = report.RSS_FLOOR_MIB if key.startswith("rss_") else 0.0
            expected = max(figure["value"], floor) / max(base[key]["value"], floor)
            assert figure["ratio"] == pytest.approx(expected, rel=1e-3, abs=1e-3), (name, key)
            if name == "local":
                assert figure["ratio"] == pytest.approx(1.0)


def test_growth_rules():
    sizes = [1.0, 10.0, 100.0, 1000.0]
    affine = growth.cost_growth(sizes, [5 + 0.1 * x for x in sizes])
    assert affine["departs_at"] is None
    quadratic = growth.cost_growth(sizes, [1 + x * x for x in sizes])
    assert quadratic["departs_at"] == 10.0 and quadratic["tail_slope"] == pytest.approx(2.0, abs=0.01)
    assert growth.cost_growth(sizes, [2 * x for x in sizes])["slope"] == pytest.approx(1.0)
    flat = growth.scaling_growth([1, 2, 4], [10.0, 10.0, 10.0])
    assert flat["departs_at"] == 2 and flat["slope"] == pytest.approx(0.0)
    assert growth.scaling_growth([1, 2, 4], [10.0, 20.0, 40.0])["departs_at"] is None


def test_missing_extra_is_named(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit, match=r"upstash_box needs its SDK, the 'upstash' extra"):
        cli.check_extras(["tempdir_box", "upstash_box"])
    with pytest.raises(SystemExit, match="unknown backend"):
        cli.check_extras(["nope"])


def test_sizes_parse():
    assert [parse_size(s) for s in ("1K", "16KiB", "4M", "100MiB", "512")] == [1024, 16384, 4 << 20, 100 << 20, 512]
