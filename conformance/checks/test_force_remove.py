"""lifecycle: cleanup(force_remove=...) as the host passes it.

The host inspects cleanup()'s signature and passes force_remove only when it
is declared: True from the prompt probe and a user's teardown, False from
turn and session teardown.  The world shows what happened to the sandbox.
"""

from __future__ import annotations

import inspect

import pytest

from conformance.checks._support import locate, not_applicable
from conformance.host.calls import bounded
from conformance.host.lifecycle import cleanup_env


def declares_force_remove(env) -> bool:
    try:
        return "force_remove" in inspect.signature(env.cleanup).parameters
    except (TypeError, ValueError):
        return False


@pytest.mark.clause("lifecycle.force-remove")
def test_force_remove_deletes_and_its_absence_keeps_a_persistent_sandbox(kit):
    removed = kit.create(kit.new_task_id("force"), persistent=True, track=False)
    if not declares_force_remove(removed):
        bounded(removed.cleanup, deadline=30, what="cleanup()")
        not_applicable("cleanup() does not declare force_remove, so the host never passes it")
    doomed = locate(kit, removed, "force")
    bounded(cleanup_env, removed, force_remove=True, deadline=30, what="cleanup(force_remove=True)")
    state = kit.world.sandboxes().get(doomed, "deleted")
    assert state == "deleted", (
        f"cleanup(force_remove=True) of a persistent environment left its sandbox {doomed} {state}; "
        "force_remove must delete it"
    )

    kept_env = kit.create(kit.new_task_id("keep"), persistent=True, track=False)
    kept = locate(kit, kept_env, "keep")
    bounded(cleanup_env, kept_env, force_remove=False, deadline=30, what="cleanup(force_remove=False)")
    state = kit.world.sandboxes().get(kept, "deleted")
    assert state != "deleted", (
        "cleanup(force_remove=False) of a persistent environment deleted its sandbox; False must keep it"
    )
