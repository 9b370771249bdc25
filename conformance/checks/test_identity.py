"""identity: commands run in the intended sandbox, not elsewhere."""

from __future__ import annotations

import os
import shlex
import tempfile

import pytest

from conformance.checks._support import keep, kept, nonce, out, plant, rc, run
from conformance.host.calls import bounded


@pytest.mark.clause("identity.task-isolation")
def test_two_task_ids_do_not_see_each_other(make_env):
    first, second = make_env(), make_env()
    rel, _ = plant(first, "task")
    seen = out(run(second, f'test -e "$HOME"/{shlex.quote(rel)} && echo visible || echo hidden')).strip()
    assert seen == "hidden", "a file written by one task id is visible to another"


@pytest.mark.clause("identity.remote-not-local")
def test_remote_commands_do_not_run_here(env):
    remote_path = f"/tmp/{nonce('remote')}"
    assert rc(run(env, f"echo planted > {remote_path}")) == 0
    try:
        assert not os.path.exists(remote_path), f"{remote_path} written through the backend appeared on this machine"
    finally:
        run(env, f"rm -f {remote_path}")
    with tempfile.NamedTemporaryFile(prefix="kit-host-", dir="/tmp") as local:
        seen = out(run(env, f"test -e {local.name} && echo visible || echo hidden")).strip()
    assert seen == "hidden", f"a file created on this machine ({local.name}) is visible through the backend"


@pytest.mark.clause("identity.persistent-own-state")
def test_persistent_task_finds_its_own_state(kit):
    ids = [kit.new_task_id("own-a"), kit.new_task_id("own-b")]
    name = f".{nonce('own')}"  # the same file name for both tasks: each must read back its own content
    marks = {}
    for task_id in ids:
        env = kit.create(task_id, persistent=True, track=False)
        marks[task_id] = nonce("own")
        keep(kit, env, name, marks[task_id])
        bounded(env.cleanup, deadline=30, what="cleanup()")
    for task_id in ids:
        env = kit.create(task_id, persistent=True)
        code, seen, where = kept(kit, env, name)
        other = next(m for t, m in marks.items() if t != task_id)
        whose = "the other task's" if seen == other else "not its own"
        assert seen == marks[task_id], (
            f"after cleanup and recreation, task {task_id} reads {seen!r} (rc={code}) from the persistent directory "
            f"{where.describe()}, {whose}: expected {marks[task_id]!r}"
        )
