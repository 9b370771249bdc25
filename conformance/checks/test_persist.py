"""persist: what survives cleanup, and how sandbox state changes are handled.

What must survive is written in the directory the backend declares it keeps
(conformance.persistent_path: a declared path, else the environment's cwd),
never in $HOME or /tmp, which a vendor may empty on a stop.
"""

from __future__ import annotations

import pytest

from conformance.checks._support import attempt, keep, kept, locate, nonce, out, plant, run
from conformance.host.calls import bounded


@pytest.mark.clause("persist.state-survives")
def test_files_survive_cleanup_for_the_same_task(kit):
    task_id = kit.new_task_id("keep")
    name, value = f".{nonce('persist')}", nonce("persist")
    first = kit.create(task_id, persistent=True, track=False)
    keep(kit, first, name, value)
    bounded(first.cleanup, deadline=30, what="cleanup()")
    second = kit.create(task_id, persistent=True)
    code, seen, where = kept(kit, second, name)
    assert seen == value, (
        f"after cleanup and recreation for the same task id, the file written in the persistent directory "
        f"{where.describe()} reads {seen!r} (rc={code}), expected {value!r}"
    )


@pytest.mark.clause("persist.paused-resumed")
def test_paused_sandbox_is_resumed(kit):
    env = kit.create(persistent=True)
    sandbox = locate(kit, env, "pause")
    name, value = f".{nonce('pause')}", nonce("pause")
    where = keep(kit, env, name, value)
    kit.world.pause(sandbox)
    code, text, _ = attempt(env, f"cat {where.file(name)}")
    assert code == 0 and text.strip() == value, (
        f"the first command after the sandbox was paused behind the backend's back (reading a file in the "
        f"persistent directory {where.describe()}) gave rc={code}, output {text[-300:]!r}; expected {value!r}"
    )
    state = kit.world.sandboxes().get(sandbox)
    assert state not in ("paused", "deleted", None), (
        f"the command succeeded but the paused sandbox is now {state or 'gone'}: it was not resumed (the command "
        "ran somewhere else)"
    )


@pytest.mark.clause("persist.deleted-replaced")
def test_deleted_sandbox_is_reported_then_replaced(kit):
    env = kit.create()
    relpath, value = plant(env, "gone")
    sandbox = kit.world.locate(relpath, value)
    kit.world.delete(sandbox)
    outcomes = [attempt(env, "echo alive") for _ in range(3)]
    codes = [c for c, _, _ in outcomes]
    assert 0 in codes[:2], f"no command succeeded within two calls after the deletion: {outcomes[:2]}"
    flags = sum(1 for _, _, r in outcomes if r.get("environment_recreated") is True)
    assert flags == 1, f"environment_recreated was set {flags} times in three results, expected exactly once"
    new_sandbox = locate(kit, env, "replaced")
    gone = out(run(env, f'test -e "$HOME"/{relpath} && echo old-files || echo fresh')).strip()
    assert gone == "fresh", "the replacement sandbox still has the deleted sandbox's files"
    assert kit.world.sandboxes().get(new_sandbox) not in (None, "deleted")


@pytest.mark.clause("persist.error-reported")
def test_error_state_is_reported_not_replaced(kit):
    env = kit.create()
    sandbox = locate(kit, env)
    before = set(kit.world.sandboxes())
    kit.world.fail(sandbox)
    code, text, _ = attempt(env, "echo should-not-run")
    assert code != 0, f"a command ran in a sandbox in the error state (rc={code}, output={text!r})"
    assert "error" in text.lower(), f"the failure does not name the error state: {text!r}"
    created = sorted(set(kit.world.sandboxes()) - before)
    assert not created, f"the broken sandbox was replaced by {created}"
    assert kit.world.sandboxes().get(sandbox) == "error", "the sandbox in the error state was changed or removed"


@pytest.mark.clause("persist.session-isolated")
def test_session_isolated_sandboxes_do_not_share(kit):
    first = kit.create(kit.new_task_id("iso-a"), persistent=False, track=False)
    second = kit.create(kit.new_task_id("iso-b"), persistent=False)
    _, mark_a = plant(first, "iso")
    rel_b, mark_b = plant(second, "iso")
    seen = out(run(second, 'cat "$HOME"/.kit-kit-iso-* 2>/dev/null')).strip()
    assert seen == mark_b, f"two task ids share a sandbox: second sees {seen!r} (first wrote {mark_a!r})"
    bounded(first.cleanup, deadline=30, what="cleanup()")
    assert out(run(second, f'cat "$HOME"/{rel_b}')).strip() == mark_b, "cleanup of one session broke the other"


@pytest.mark.clause("persist.nonpersistent-fresh")
def test_nonpersistent_recreation_starts_fresh(kit):
    task_id = kit.new_task_id("fresh")
    first = kit.create(task_id, persistent=False, track=False)
    # In the workspace, which a kept sandbox keeps even where a stop empties $HOME.
    name, value = f".{nonce('fresh')}", nonce("fresh")
    keep(kit, first, name, value)
    bounded(first.cleanup, deadline=30, what="cleanup()")
    second = kit.create(task_id, persistent=False)
    _, seen, where = kept(kit, second, name)
    assert seen != value, (
        f"a non-persistent environment found the previous one's file in {where.describe()}: the sandbox was kept "
        "and attached again"
    )
