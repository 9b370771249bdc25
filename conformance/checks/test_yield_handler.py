"""exec: the yield_handler keyword of BaseEnvironment.execute.

The host passes a handler only to its local backend, so a plugin backend
need not take the keyword; one that does must treat yield_handler=None as
no handler at all.
"""

from __future__ import annotations

import inspect

import pytest

from conformance.checks._support import not_applicable, out, rc, run

pytestmark = pytest.mark.usefixtures("kit")


@pytest.mark.clause("exec.yield-handler")
def test_yield_handler_none_changes_nothing(env):
    params = inspect.signature(env.execute).parameters
    if "yield_handler" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        not_applicable("execute() takes no yield_handler; the host never passes one to a plugin backend")
    result = run(env, "echo yielded-none", yield_handler=None)
    assert out(result).strip() == "yielded-none" and rc(result) == 0, (
        f"execute(..., yield_handler=None) did not run the command as without it: {result!r}"
    )
