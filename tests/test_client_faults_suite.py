"""The transport-fault clauses, observed with faults injected in the backend's client instead of the fake.

For upstash_box and deepinfra, the transport checks run twice against each
backend's fake: with the fake's fault script, and with ``--client-faults``
(nothing armed in the fake; respx in the httpx client, the fault proxy in
front of Upstash's WebSocket exec session).  Every transport clause gets a
verdict both ways (none unverified or skipped), the same one, and the report
says which way was used.  The mutants that break transport-fault handling
fail exactly their own clauses client-side, as tests/test_mutants.py requires
of them through the fake.
"""

from __future__ import annotations

import importlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conformance import contract
from fakes.mutants import MUTANTS
from tests.conftest import SuiteRun, run_suite

TRANSPORT = [c.id for c in contract.load().clauses if "transport-faults" in c.capabilities]
TRANSPORT_MUTANTS = (
    "resends_commands",
    "no_rate_limit_retry",
    "blocking_finalizer",
    "open_without_deadline",
    "raises_after_start",
    "timeout_word_in_error",
)


def _both_ways(tmp_path: Path, *args: str) -> tuple[SuiteRun, SuiteRun]:
    """The same suite with the fake's faults and with client-side faults, side by side, one process each:
    their checks mostly wait on the faults (silences, timeouts), so the two runs share the cores well."""
    (tmp_path / "fake").mkdir()
    (tmp_path / "client").mkdir()
    with ThreadPoolExecutor(max_workers=2) as pool:
        fake = pool.submit(run_suite, *args, cwd=tmp_path / "fake", workers=0)
        client = pool.submit(run_suite, *args, "--client-faults=on", cwd=tmp_path / "client", workers=0)
        return fake.result(), client.result()


@pytest.mark.suite
@pytest.mark.full
@pytest.mark.parametrize("backend", ["upstash_box", "deepinfra"])
def test_transport_clauses_get_the_same_verdicts_with_faults_injected_client_side(tmp_path, backend):
    fake, client = _both_ways(tmp_path, "--backend", backend, "-k", "transport")
    by_fake = {cid: fake.verdicts()[cid] for cid in TRANSPORT}
    by_client = {cid: client.verdicts()[cid] for cid in TRANSPORT}
    assert len(TRANSPORT) >= 8 and set(by_fake.values()) <= {"pass", "fail"}, (
        f"through the fake: {by_fake}\n{fake.output[-3000:]}"
    )
    assert by_client == by_fake, f"client-side: {by_client}\n{client.output[-3000:]}"
    assert fake.report["backend"]["transport_faults"] == "fake"
    assert client.report["backend"]["transport_faults"] == f"client-side ({backend.split('_')[0]} routes)"


def test_the_transport_mutants_are_the_ones_scoped_to_the_transport_checks(builtin_host):
    scoped = [
        name
        for name in MUTANTS
        if "test_transport_faults" in getattr(importlib.import_module(f"fakes.mutants.{name}"), "SCOPE", "")
    ]
    assert sorted(scoped) == sorted(TRANSPORT_MUTANTS)


@pytest.mark.suite
@pytest.mark.full
@pytest.mark.parametrize("name", TRANSPORT_MUTANTS)
def test_a_transport_mutant_fails_the_same_clauses_with_faults_injected_client_side(name, tmp_path, builtin_host):
    """Client-side, the mutant fails exactly BREAKS: the clauses tests/test_mutants.py requires it to fail,
    exactly, through the fake's fault script with the same scope and fake.  Together the two tests say it
    fails the same clauses both ways, and the fake's way runs once in the kit's tests, not twice."""
    module = importlib.import_module(f"fakes.mutants.{name}")
    client = run_suite(
        "--backend",
        f"fakes.mutants.{name}:provider",
        "--fake",
        module.FAKE,
        "-k",
        module.SCOPE,
        "-W",
        "ignore::DeprecationWarning",
        "--client-faults=on",
        cwd=tmp_path,
    )
    assert client.report is not None, client.output[-2000:]
    assert client.report["backend"]["transport_faults"].startswith("client-side"), client.report["backend"]
    assert client.failed() == set(module.BREAKS), (
        f"mutant {name} ({module.WHAT}): client-side unexpected failures {sorted(client.failed() - module.BREAKS)}, "
        f"missed {sorted(module.BREAKS - client.failed())}"
    )
