"""The transport-fault clauses, earned with faults injected in the backend's client instead of the fake.

For upstash_box and deepinfra, the transport checks run twice against each
backend's fake: with the fake's fault script, and with ``--client-faults``
(nothing armed in the fake; respx in the httpx client, the fault proxy in
front of Upstash's WebSocket exec session).  Every transport clause passes
both ways, with the same verdicts, and the report says which way was used.
"""

from __future__ import annotations

import pytest

from conformance import contract
from tests.conftest import run_suite

TRANSPORT = [c.id for c in contract.load().clauses if "transport-faults" in c.capabilities]


@pytest.mark.suite
@pytest.mark.parametrize("backend", ["upstash_box", "deepinfra"])
def test_transport_clauses_pass_the_same_with_faults_injected_client_side(tmp_path, backend):
    (tmp_path / "fake").mkdir()
    (tmp_path / "client").mkdir()
    fake = run_suite("--backend", backend, "-k", "transport", cwd=tmp_path / "fake")
    client = run_suite("--backend", backend, "-k", "transport", "--client-faults=on", cwd=tmp_path / "client")
    by_fake = {cid: fake.verdicts()[cid] for cid in TRANSPORT}
    by_client = {cid: client.verdicts()[cid] for cid in TRANSPORT}
    assert len(TRANSPORT) >= 8 and set(by_fake.values()) == {"pass"}, f"through the fake: {by_fake}\n{fake.output[-3000:]}"
    assert by_client == by_fake, f"client-side: {by_client}\n{client.output[-3000:]}"
    assert fake.report["backend"]["transport_faults"] == "fake"
    assert client.report["backend"]["transport_faults"] == f"client-side ({backend.split('_')[0]} routes)"
