"""Black-box checks: part of what a world view shows, observed through the backend alone.

Each check here cites a clause that needs the harness's world (or its world
states) and observes what the backend's own interface can show of it:
sessions that must outlive another session's cleanup, a sandbox that must
not be found again, and a sandbox deleted through the vendor's own API
(``provider.conformance_delete_sandbox(env)``, or the world's delete when the
run has one).  They run in every run, beside the world-based checks of the
same clauses (test_lifecycle.py, test_persist.py).

A failure here fails the clause.  A pass shows no violation, never the whole
clause (no channel but the backend sees a sandbox leaked or another one
created), so a clause whose world-based check could not run stays
unverified (conformance.verdicts.combine).
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from conformance.capabilities import DELETE_HOOK
from conformance.checks._support import attempt, keep, kept, locate, nonce, not_applicable, plant, rc, run
from conformance.checks.test_force_remove import declares_force_remove
from conformance.host.calls import bounded
from conformance.host.lifecycle import cleanup_env


def _read(env: Any, relpath: str) -> tuple[int | None, str]:
    code, text, _ = attempt(env, f'cat "$HOME"/{shlex.quote(relpath)} 2>/dev/null || echo kit-absent')
    return code, text.strip()


def delete_sandbox(kit: Any, env: Any) -> str:
    """Delete the sandbox ``env`` runs in behind its back; say through which channel."""
    hook = getattr(kit.provider, DELETE_HOOK, None)
    if callable(hook):
        kit.call(hook, env, deadline=30.0, what=f"provider.{DELETE_HOOK}(env)")
        return f"provider.{DELETE_HOOK}"
    kit.world.delete(locate(kit, env))
    return "the harness world"


@pytest.mark.black_box
@pytest.mark.clause("lifecycle.delete-own-only")
def test_cleanup_leaves_other_sessions_running_with_their_files(kit, make_env):
    task_id = kit.new_task_id("own-bb")
    mine = kit.create(task_id, track=False)
    envs = {"twin (another session, same task id)": make_env(task_id), "other task id": make_env()}
    planted = {name: plant(env, "own-bb") for name, env in envs.items()}
    mine_rel, mine_value = plant(mine, "own-bb")
    for name, env in envs.items():
        _, seen = _read(env, mine_rel)
        assert seen != mine_value, f"the {name} sees the first session's file: the two share a sandbox"
    kit.cleanup(mine)
    for name, env in envs.items():
        rel, value = planted[name]
        code, seen = _read(env, rel)
        assert code == 0 and seen == value, (
            f"after cleanup() of one session's environment, the {name} no longer works with its files: "
            f"reading its own file gave rc={code}, {seen[:300]!r} (expected {value!r}); cleanup deleted "
            "more than the sandbox it created"
        )


@pytest.mark.black_box
@pytest.mark.clause("lifecycle.nonpersistent-deleted")
def test_a_cleaned_up_nonpersistent_sandbox_is_not_found_again(kit, make_env):
    task_id = kit.new_task_id("gone-bb")
    first = kit.create(task_id, persistent=False, track=False)
    # In the workspace, which a kept sandbox keeps even where a stop empties $HOME.
    name, value = f".{nonce('gone-bb')}", nonce("gone-bb")
    keep(kit, first, name, value)
    kit.cleanup(first)
    second = make_env(task_id, persistent=False)
    _, seen, where = kept(kit, second, name)
    assert seen != value, (
        f"after cleanup() of a non-persistent environment, a new environment for the same task id found its "
        f"file in {where.describe()}: the sandbox was kept (and reattached), not deleted"
    )


@pytest.mark.black_box("sandbox-delete")
@pytest.mark.clause("lifecycle.gone-counts-deleted")
def test_cleanup_after_the_sandbox_was_deleted_elsewhere(kit):
    env = kit.create(track=False)
    assert rc(run(env, "true")) == 0
    channel = delete_sandbox(kit, env)
    try:
        kit.cleanup(env, deadline=30.0)
    except AssertionError:
        raise
    except Exception as exc:
        raise AssertionError(
            f"cleanup() of an environment whose sandbox was deleted through {channel} raised "
            f"{type(exc).__name__}: {exc}"
        ) from None


@pytest.mark.black_box("sandbox-delete")
@pytest.mark.clause("persist.deleted-replaced")
def test_sandbox_deleted_elsewhere_is_reported_then_replaced(kit, env):
    relpath, value = plant(env, "gone-bb")
    channel = delete_sandbox(kit, env)
    outcomes = [attempt(env, "echo alive") for _ in range(3)]
    codes = [c for c, _, _ in outcomes]
    assert 0 in codes[:2], (
        f"no command succeeded within two calls after the sandbox was deleted through "
        f"{channel}: {[(c, t[:200]) for c, t, _ in outcomes[:2]]}"
    )
    flags = sum(1 for _, _, r in outcomes if r.get("environment_recreated") is True)
    assert flags == 1, (
        f"after the sandbox was deleted through {channel}, environment_recreated was set {flags} times in three "
        "results, expected exactly once: a replaced sandbox must be reported, once"
    )
    code, seen = _read(env, relpath)
    assert code == 0 and seen != value, (
        f"after the sandbox was deleted through {channel}, the environment still reads its file "
        f"(rc={code}): the command ran in the deleted sandbox or its files were carried over"
    )


@pytest.mark.black_box
@pytest.mark.clause("lifecycle.force-remove")
def test_a_force_removed_persistent_sandbox_is_not_found_again(kit, make_env):
    task_id = kit.new_task_id("force-bb")
    first = kit.create(task_id, persistent=True, track=False)
    if not declares_force_remove(first):
        bounded(first.cleanup, deadline=30, what="cleanup()")
        not_applicable("cleanup() does not declare force_remove, so the host never passes it")
    # In the directory the backend keeps: what a kept sandbox would show the next environment.
    name, value = f".{nonce('force-bb')}", nonce("force-bb")
    keep(kit, first, name, value)
    bounded(cleanup_env, first, force_remove=True, deadline=30, what="cleanup(force_remove=True)")
    second = make_env(task_id, persistent=True)
    _, seen, where = kept(kit, second, name)
    assert seen != value, (
        f"after cleanup(force_remove=True) of a persistent environment, a new environment for the same task id "
        f"found its file in {where.describe()}: the sandbox was kept and reattached; force_remove must delete it"
    )
