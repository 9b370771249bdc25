"""exec: execute_code's file-based RPC while its script runs.

drivers.execute_code ships a python3 script that writes request files and
waits for responses, runs it with one execute() call, and meanwhile a
poller thread lists, reads and answers the requests with execute() calls
of its own, exactly as tools/code_execution_tool.py does on remote backends.
"""

from __future__ import annotations

import pytest

from conformance.checks._support import out, rc
from conformance.host.drivers import execute_code

pytestmark = pytest.mark.usefixtures("kit")

CALLS = 4


@pytest.mark.clause("exec.execute-code-rpc")
def test_script_completes_while_a_poller_answers_its_rpcs(env):
    # Answers the driver's default cannot produce, so the total proves the poller's responses were read.
    outcome = execute_code(env, calls=CALLS, timeout=30, answer=lambda req: req["args"]["n"] * 10 + 1)
    expected = sum(n * 10 + 1 for n in range(CALLS))
    text = out(outcome.result)
    assert not outcome.poll_errors, (
        f"the polling thread's execute() calls failed while the script ran: {outcome.poll_errors[:3]}"
    )
    assert rc(outcome.result) == 0, (
        f"the script exited {rc(outcome.result)} (3 means an RPC was never answered): {text[-300:]!r}"
    )
    assert f"total {expected}" in text, f"the script printed {text[-300:]!r}, expected 'total {expected}'"
    assert outcome.answered == CALLS, f"the poller answered {outcome.answered} requests, the script made {CALLS}"
