"""A run with xdist workers probes its host once (the controller's preflight) and hands the result on."""

from __future__ import annotations

import textwrap

import pytest

from conformance.host import features
from tests.conftest import run_suite

# A pytest plugin for the run under test: every call of features.detect, in any process, adds a line.
COUNTER = textwrap.dedent(
    """
    import os
    from conformance.host import features

    _detect = features.detect

    def detect(*args, **kwargs):
        with open(os.environ["KIT_TEST_PROBE_LOG"], "a") as log:
            log.write(f"{os.getpid()}\\n")
        return _detect(*args, **kwargs)

    features.detect = detect
    """
)


@pytest.mark.suite
def test_the_workers_take_the_preflights_host_features(tmp_path):
    (tmp_path / "probe_counter.py").write_text(COUNTER)
    log = tmp_path / "probes.log"
    run = run_suite(
        "--backend",
        "tempdir_box",
        "-p",
        "probe_counter",
        "-k",
        "test_exec and (returncode or result_shape)",
        cwd=tmp_path,
        workers=2,
        timeout=300,
        extra_env={"KIT_TEST_PROBE_LOG": str(log), "PYTHONPATH": str(tmp_path)},
    )
    assert run.report is not None, run.output[-3000:]
    ran = [c for c in run.report["clauses"] if c["verdict"] == "pass"]
    assert ran, run.output[-3000:]
    probes = log.read_text().split()
    # One probe, in the controller: without the hand-over each of the two workers probes too.
    assert len(probes) == 1, f"{len(probes)} processes probed the host: {probes}"
    assert set(run.report["host"]["features"]) == set(features.PROBES) | set(features.ABI_PROBES)
