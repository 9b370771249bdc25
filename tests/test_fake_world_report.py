"""The report and the terminal say whether the fake's boxes were isolated from the machine."""

from __future__ import annotations

import pytest

from fakes.world import World
from tests.conftest import run_suite

pytestmark = pytest.mark.suite

_PROBE = World(namespaces=None)
_PROBE.close()


@pytest.mark.parametrize("namespaces", ["on", "off"])
def test_the_report_records_how_the_fake_boxes_ran(tmp_path, namespaces):
    if namespaces == "on" and not _PROBE.isolated:
        pytest.skip(f"no usable namespaces here: {_PROBE.paths_note}")
    run = run_suite(
        "--backend",
        "upstash_box",
        "-k",
        "test_exec and returncode",
        cwd=tmp_path,
        workers=0,
        extra_env={"KIT_WORLD_NAMESPACES": namespaces},
        timeout=300,
    )
    assert run.report is not None, run.output[-3000:]
    world = run.report["fake_world"]
    assert world["isolated"] is (namespaces == "on"), world
    if world["isolated"]:
        assert "fake boxes: isolated from this machine" in run.output
    else:
        assert "fake boxes: NOT isolated" in run.output and world["paths_note"] in run.output
