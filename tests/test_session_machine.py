"""Random Hermes sessions on every default backend, against its fake.

One Harness (KitRun + fake + environment pool) per backend per worker process,
shared by the random runs and the regression replays.  Each backend's 200
examples run as CHUNKS test items with fixed seeds: CI is deterministic, and
under -n 2 no item comes near the 100 s faulthandler dump.  `nox -s soak`
runs a larger, freshly randomized run.  KIT_MACHINE_EXAMPLES overrides the
per-backend example count.
"""

from __future__ import annotations

import json
import os
import tempfile
import zlib
from pathlib import Path

import pytest

from conformance import backends
from conformance.session_model import Harness, SessionMachine, regression_json, replay, run_machine

BACKENDS = backends.DEFAULT_BACKENDS
EXAMPLES = int(os.environ.get("KIT_MACHINE_EXAMPLES", "200"))
CHUNKS = 2
STEPS = 6
REGRESSIONS = Path(__file__).parent / "regressions" / "session_machine"


def _cases() -> list[tuple[str, Path]]:
    cases = []
    for path in sorted(REGRESSIONS.glob("*.json")):
        wanted = json.loads(path.read_text())["backends"]
        cases += [(b, path) for b in BACKENDS if wanted == "all" or b in wanted]
    return cases


@pytest.fixture(scope="session")
def harnesses(tmp_path_factory):
    """Start each backend's fake once per worker, on first use."""
    started: dict[str, Harness] = {}

    def get(backend: str) -> Harness:
        if backend not in started:
            started[backend] = Harness(backend, tmp_path_factory.mktemp(f"machine-{backend}"))
        return started[backend]

    yield get
    for harness in started.values():
        harness.close()


@pytest.mark.full  # a soak: long random sessions per backend (the regression replays below stay in nox -s tests)
@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_sessions_match_the_model(harnesses, backend, chunk):
    harness = harnesses(backend)
    try:
        run_machine(harness, -(-EXAMPLES // CHUNKS), steps=STEPS, seed=zlib.crc32(f"{backend}/{chunk}".encode()))
    except Exception as exc:
        raise AssertionError(
            f"{exc}\n\nTo keep this as a regression, save the JSON below as "
            f"tests/regressions/session_machine/<short-name>.json:\n"
            f"{regression_json(backend, SessionMachine.last_trace)}"
        ) from exc


@pytest.mark.parametrize(("backend", "path"), _cases(), ids=lambda v: v.stem if isinstance(v, Path) else v)
def test_regression_replays(harnesses, backend, path):
    replay(harnesses(backend), json.loads(path.read_text())["steps"])


def test_a_harness_changes_this_process_only_while_active(tmp_path):
    # KitRun.start exports the fake's variables and points tempfile at the run's TMPDIR; a test that runs
    # later in the same worker (a browser whose socket path must stay short) must see neither.
    environ, tempdir = dict(os.environ), tempfile.tempdir
    harness = Harness("tempdir_box", tmp_path)
    try:
        assert (dict(os.environ), tempfile.tempdir) == (environ, tempdir)
        with harness.active():
            assert tempfile.gettempdir().startswith(str(tmp_path)) and os.environ["TMPDIR"] == tempfile.gettempdir()
        assert (dict(os.environ), tempfile.tempdir) == (environ, tempdir)
    finally:
        harness.close()
    assert (dict(os.environ), tempfile.tempdir) == (environ, tempdir)
