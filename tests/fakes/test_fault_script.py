"""Faults armed by role: every route of the role, cleared without touching others' faults."""

from __future__ import annotations

import pytest

from fakes.fault_script import FaultScript
from fakes.faults import Fault, Faults

ROUTES = {"create": ("POST /boxes",), "exec": ("WS exec", "POST /boxes/{id}/exec"), "read": ("GET /boxes/{id}",)}


def test_a_role_arms_each_of_its_routes_and_counts_firings():
    faults = Faults()
    script = FaultScript(faults, ROUTES)
    armed = script.arm("status", "exec", status=503, times=1)
    assert faults.take("GET /boxes/{id}", "b1") is None
    assert faults.take("WS exec", "b1").status == 503
    assert faults.take("POST /boxes/{id}/exec", "b1").status == 503
    assert faults.take("WS exec", "b1") is None, "times=1 fires once per route"
    assert armed.fired == 2 and len(script.attempts("exec")) == 2 and script.attempts("read") == []


def test_clear_removes_only_what_the_script_armed():
    faults = Faults()
    theirs = faults.arm(Fault("latency", route="POST /boxes", times=-1))
    script = FaultScript(faults, ROUTES)
    script.arm("silence", "create", times=-1)
    script.clear()
    assert faults.take("POST /boxes") is theirs


def test_a_sandbox_scoped_fault_spares_other_sandboxes():
    script = FaultScript(faults := Faults(), ROUTES)
    script.arm("drop", "read", sandbox="b1")
    assert faults.take("GET /boxes/{id}", "b2") is None
    assert faults.take("GET /boxes/{id}", "b1").kind == "drop"


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda s: s.arm("status", "delete"), "this fake has no 'delete' routes; it has create, exec, read"),
        (lambda s: s.arm("explode", "exec"), "unknown fault kind 'explode'"),
        (lambda s: FaultScript(Faults(), {"write": ("PUT /x",)}), "unknown fault role(s) ['write']"),
    ],
)
def test_mistakes_name_the_problem(call, message):
    with pytest.raises(ValueError) as caught:
        call(FaultScript(Faults(), ROUTES))
    assert message in str(caught.value)
