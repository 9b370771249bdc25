"""The benchmark's output shape and arithmetic (never its speed): a tiny quick run on tempdir_box."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.backends import KNOWN_BACKENDS, SERVICE_BACKENDS
from conformance.bench import calls, cli, cold, goals, growth, minimal, report
from conformance.bench.measure import parse_size
from conformance.bench.minimal import ColdSample
from conformance.host import abi
from fakes import process

ROOT = Path(__file__).resolve().parents[1]
FIGURES = {
    "cold_start_ms",
    "rtt_p50_ms",
    "rtt_p95_ms",
    "output_bounded_mib_s",
    "output_full_mib_s",
    "rss_bounded_mib",
    "rss_full_mib",
    "stdin_mib_s",
    "sync_push_s",
    "sync_back_s",
    "suite_s",
}


# A tiny quick run: the figures' shape, never their speed.
TINY = [
    "--quick",
    "--skip-suite",
    *("--sizes", "1K,8K", "--stream-size", "64K", "--stdin-size", "64K"),
    *("--sync-files", "5", "--sync-big-size", "64K", "--concurrency", "1,2", "--per-call-size", "16K"),
    *("--rounds", "3", "--cold-samples", "1", "--world-rounds", "5"),
]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore::DeprecationWarning",
            "-m",
            "conformance.bench",
            *TINY,
            "--backends",
            "tempdir_box",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
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
    cold_start = data["targets"]["tempdir_box"]["figures"]["cold_start_ms"]
    assert cold_start["detail"]["interleaved"] and len(cold_start["detail"]["samples_ms"]) == 1
    assert data["minimal"] == {} and data["goals"] == {}  # no reference backend in this run
    assert set(data["machine"]["load_average_1m"]) == {"start", "end"}
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
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore::DeprecationWarning",
            "-m",
            "conformance.bench",
            "--world-only",
            "--world-rounds",
            "3",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    updated = json.loads(out.read_text())
    assert updated["world"]["ratio"] > 0 and updated["world_detail"]["rounds"] == 3
    assert {k: v for k, v in updated.items() if not k.startswith("world")} == {
        k: v for k, v in data.items() if not k.startswith("world")
    }
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


# The channel each vendor's minimal client runs a command on, as calls.py names it.
EXEC_CALL = {
    "upstash_box": "WS /v2/box/{id}/exec-session",
    "deepinfra": "POST /v1/sandboxes/{id}/exec",
    "cloudflare_sandbox": "POST /v1/sandboxes/{id}/exec",
}


@pytest.mark.parametrize("backend", SERVICE_BACKENDS)
def test_minimal_client_reaches_a_first_result_on_its_fake(backend, tmp_path):
    """Each vendor's minimal client runs `true` and streams output on its fake, and releases its sandboxes."""
    known = KNOWN_BACKENDS[backend]
    if known.missing_extra():
        pytest.skip(known.missing_extra())
    assert backend in minimal.MINIMAL_CLIENTS, "every reference backend of a vendor service has a minimal client"
    assert known.fake is not None
    fake = process.spawn(known.fake, tmp_path / "fake")
    client = minimal.for_backend(backend, fake.env)
    assert client is not None and client.backend == backend

    def live() -> dict[str, str]:
        return {sid: state for sid, state in fake.world.sandboxes().items() if state != "deleted"}

    abi.install("builtin")  # the host whose bare environment runs the client's in-host cold start
    try:
        with calls.recorded() as bare_calls:
            sample = client.cold_start()
        assert 0 < sample.created_s <= sample.result_s
        assert live() == {}, "the cold start left its sandbox behind"
        with calls.recorded() as host_calls:
            in_host = client.cold_start(in_host=True)
        assert live() == {}, "the cold start in the host left its sandbox behind"
        # In the host, one exec more (the session bootstrap before the wrapped `true`), nothing else.
        bare, hosted = bare_calls.before(sample.ended), host_calls.before(in_host.ended)
        assert calls.beyond(bare, hosted) == {} and calls.beyond(hosted, bare) == {EXEC_CALL[backend]: 1}, hosted
        assert client.stream(64 * 1024) > 0  # raises unless exactly 64 KiB of output came back
        assert live() == {}, "the stream left its sandbox behind"
    finally:
        client.close()
        fake.stop()


def test_cold_start_rounds_rotate_after_an_unmeasured_warm_up():
    calls: list[str] = []

    def start(name: str, fail_at: int | None = None):
        def run() -> ColdSample:
            calls.append(name)
            if fail_at is not None and calls.count(name) == fail_at:
                raise RuntimeError("sandbox refused")
            return ColdSample(0.001, 0.002)

        return run

    a, b, c = (
        cold.Contender("a", start("a")),
        cold.Contender("b", start("b")),
        cold.Contender("c", start("c", fail_at=3)),
    )
    cold.interleave([a, b, c], 3, lambda *args: None)
    assert calls[:3] == ["a", "b", "c"]  # the warm-up round
    assert calls[3:6] == ["b", "c", "a"] and calls[6:8] == ["c", "a"]  # rotated; c failed in round 2
    assert len(a.samples) == len(b.samples) == 3 and c.samples == [ColdSample(0.001, 0.002)]
    assert c.error == "RuntimeError: sandbox refused" and a.error is None
    assert a.result_ms == pytest.approx(2.0) and a.detail()["interleaved"] is True


def test_targets_are_met_or_missed_from_the_same_run():
    def target(cold_ms: float | None, bounded: float | None) -> dict:
        figures = {
            "cold_start_ms": {"value": cold_ms, "detail": {"interleaved": True}},
            "output_bounded_mib_s": {"value": bounded},
        }
        return {"figures": figures}

    data = {
        "options": {"stream": 100 << 20},
        "targets": {
            "tempdir_box": target(100.0, 300.0),
            "upstash_box": target(210.0, 120.0),
            "deepinfra": target(150.0, 40.0),
        },
    }
    found = goals.evaluate(
        data,
        {
            "upstash_box": {
                "cold_start_ms": 150.0,
                "output_mib_s": 90.0,
                "in_host": {"cold_start_ms": 200.0},
                "calls": {"beyond": {"WS /v2/box/{id}/exec-session": 1, "GET /odd": 2}},
            },
            "deepinfra": {"cold_start_ms": None, "error": "RuntimeError: boom", "in_host": {}},
        },
    )
    up = found["upstash_box"]["checks"]
    assert up["cold_vs_minimal"] == {"value": 1.05, "limit": 1.1, "met": True}
    assert up["cold_vs_tempdir_box"] == {"value": 2.1, "limit": 2.0, "met": False}
    assert up["bounded_mib_s"] == {"value": 120.0, "limit": 100.0, "met": True}
    assert found["upstash_box"]["minimal_output_mib_s"] == 90.0
    deep = found["deepinfra"]["checks"]
    assert deep["cold_vs_minimal"]["met"] is None and deep["cold_vs_minimal"]["na"] == "RuntimeError: boom"
    assert deep["cold_vs_tempdir_box"]["met"] is True and deep["bounded_mib_s"]["met"] is False
    markdown = "\n".join(goals.markdown({**data, "goals": found}))
    assert (
        "| upstash_box | 210 ms | 150 ms | 200 ms | 1.05x (pass, ≤ 1.1x) | 100 ms | 2.10x (miss, ≤ 2x) | "
        "120.0 MiB/s (pass, ≥ 100 MiB/s) | 90.0 MiB/s |"
    ) in markdown
    # Each call beyond the minimal client's is named with its reason, or flagged when there is none.
    assert (
        "- **upstash_box**: 2 x `GET /odd` (no reason recorded: a call to look at); "
        "1 x `WS /v2/box/{id}/exec-session` (the first contact" in markdown
    )
    assert "- **deepinfra**: not traced" in markdown
    quick = goals.evaluate(
        {**data, "options": {"stream": 4 << 20}}, {"upstash_box": {"in_host": {"cold_start_ms": 200.0}}}
    )
    assert quick["upstash_box"]["checks"]["bounded_mib_s"]["na"] == "measured at 4 MiB, not 100 MiB"


def test_profile_summary_splits_the_client_from_the_fake(tmp_path):
    """py-spy --subprocesses stacks start with their processes' frames: the innermost one decides."""
    from conformance.bench import profile

    client = 'process 10:"python -m conformance.bench.profile run --backend deepinfra"'
    fake = 'process 11:"/usr/bin/python -m fakes.process deepinfra --root /tmp/x"'
    box = 'process 12:"/usr/bin/python -I -S /work/isolation/box_init.py 5"'
    raw = tmp_path / "prof.txt"
    raw.write_text(
        "\n".join(
            [
                f"{client};run (conformance/bench/profile.py:60);feed (reference/common/stream_handle.py:44) 30",
                f"{client};{fake};loop (asyncio/base_events.py:600);encode (fakes/deepinfra/exec_stream.py:80) 60",
                f"{client};{fake};{box};fill (isolation/box_init.py:90) 10",
            ]
        )
        + "\n"
    )
    assert profile.process_role(box) == "box init processes (the fake's box world)"
    text = profile.summarize(raw)
    assert "60.0%  fake process (server)" in text and "30.0%  client process (kit, host, backend)" in text
    assert "10.0%  box init processes" in text
    only_client = profile.summarize(raw, only="client")
    assert "30 samples" in only_client and "100.0%  feed (reference/common/stream_handle.py)" in only_client
    assert profile.summarize(raw, only="nothing such") == "no samples of a process whose role contains 'nothing such'"
