"""Every fault kind against reference backends both ways: the fake's fault script, and client-side injection.

Each reference backend runs against its own fake twice: once with faults
armed in the fake (``kit.world.faults`` is the fake's script), once with
``--client-faults`` (``kit.world.faults`` is conformance/client_faults.py:
respx in the backend's httpx client, the fault proxy in front of its
WebSocket session).  The same scenarios run both ways, each through Hermes's
terminal tool (a command that records its own runs), and what Hermes would
see must be the same: whether execute() raised, the exit code, and how many
times the command ran.  deepinfra speaks HTTP only; upstash_box runs its
commands over a WebSocket, so its exec faults go through the proxy.

``flood`` makes a command's output huge in the service; the client side
cannot, and refuses it (the last test).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from conformance.checks._run_count import count_runs, counting, drive
from conformance.checks._support import out, rc, run
from conformance.client_faults import FaultWorld
from conformance.run import KitRun, RunOptions

BACKENDS = ("deepinfra", "upstash_box")
COMMAND = "head -c 4096 /dev/zero | tr '\\0' s; echo; sleep 1; echo finished; exit 7"
EXEC_FAULTS: dict[str, dict[str, Any]] = {
    "drop": {"after_bytes": 2048},
    "half-close": {},
    "silence": {},
    "status": {"status": 500, "message": "Internal server error"},
    "garbage": {},
    "truncate": {},
    "latency": {"delay_s": 0.3},
}
KINDS = (*EXEC_FAULTS, "status-on-create", "status-on-read")


def _exec_outcome(kit: KitRun, kind: str, notes: dict[str, str]) -> tuple[Any, ...]:
    """A fresh sandbox per scenario: a backend may still be stopping the last one's command."""
    env = kit.create()
    assert rc(run(env, "true")) == 0, "a plain command failed before any fault was armed"
    command, record = counting(kit, env, kind, COMMAND)
    armed = kit.world.faults.arm(kind, "exec", **EXEC_FAULTS[kind])
    try:
        outcome = drive(env, command, timeout=3)
    finally:
        kit.world.faults.clear()
    ran_to_end = outcome.exit_code == 7 and "finished" in outcome.output
    runs = count_runs(kit, env, record, expect=0 if kind in ("silence", "status") else 1).runs
    notes[kind] = outcome.error or outcome.output[-200:]
    kit.release(env)
    return armed.fired >= 1, bool(outcome.raised), outcome.exit_code, ran_to_end, runs


def _create_outcome(kit: KitRun) -> tuple[Any, ...]:
    armed = kit.world.faults.arm("status", "create", times=2, status=429, message="Too many requests")
    try:
        result = run(kit.create(), "echo up")
    finally:
        kit.world.faults.clear()
    return armed.fired, rc(result), "up" in out(result)


def _read_outcome(kit: KitRun) -> tuple[Any, ...]:
    armed = kit.world.faults.arm("status", "read", times=2, status=503, message="Service temporarily unavailable")
    try:
        env = kit.create(persistent=None)
        result = run(env, "echo read-ok")
        kit.release(env)
    finally:
        kit.world.faults.clear()
    return armed.fired >= 1, rc(result), "read-ok" in out(result)


def _outcomes(backend: str, way: str, workdir: Path, notes: dict[str, str]) -> dict[str, tuple[Any, ...]]:
    before = dict(os.environ)
    kit = KitRun.start(
        RunOptions(backend=backend, host="builtin", client_faults="on" if way == "client" else "off"), workdir
    )
    try:
        assert isinstance(kit.world, FaultWorld) is (way == "client"), kit.world
        found = {kind: _exec_outcome(kit, kind, notes) for kind in EXEC_FAULTS}
        found["status-on-create"] = _create_outcome(kit)
        found["status-on-read"] = _read_outcome(kit)
        if way == "client":  # nothing was armed in the fake: its own script met no request
            fake_script = kit.fake.world.faults
            assert [fake_script.attempts(role) for role in ("create", "exec", "read")] == [[], [], []]
        return found
    finally:
        kit.close()
        os.environ.clear()
        os.environ.update(before)


@pytest.mark.full  # a client-fault suite: every fault kind through both injectors, per backend
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_fault_kind_means_the_same_in_the_fake_and_in_the_client(tmp_path, backend):
    said: dict[str, dict[str, str]] = {"fake": {}, "client": {}}
    fake = _outcomes(backend, "fake", tmp_path / "fake", said["fake"])
    client = _outcomes(backend, "client", tmp_path / "client", said["client"])
    assert set(fake) == set(client) == set(KINDS)
    unfired = [kind for kind in KINDS if not fake[kind][0]]
    assert not unfired, f"{backend}: the fake's faults never fired: {unfired}"
    differ = [
        f"{kind}: through the fake's script {fake[kind]}, injected client-side {client[kind]}; Hermes saw "
        f"{said['fake'].get(kind)!r} and {said['client'].get(kind)!r}"
        for kind in KINDS
        if fake[kind] != client[kind]
    ]
    assert not differ, f"{backend} (fired, raised, exit code, ran to the end, runs): " + "; ".join(differ)


def test_flood_is_the_services_and_client_side_injection_refuses_it():
    from conformance import fault_routes
    from conformance.client_faults import ClientFaults

    with pytest.raises(ValueError, match="cannot make a command print more"):
        ClientFaults(fault_routes.vendor("deepinfra")).arm("flood", "exec")
