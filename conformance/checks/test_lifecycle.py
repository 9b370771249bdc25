"""lifecycle: creation, teardown and the host's cleanup paths."""

from __future__ import annotations

import gc
import sys
import threading
import time
from typing import Any

import pytest

from conformance import hermes_builtins
from conformance.checks._support import locate, not_applicable, out, rc, run
from conformance.host.calls import Call, bounded
from conformance.host.lifecycle import EnvCache, is_persistent_env


@pytest.mark.clause("lifecycle.cleanup-idempotent")
def test_cleanup_can_be_repeated(kit):
    env = kit.create(track=False)
    assert rc(run(env, "true")) == 0
    for attempt in range(3):
        bounded(env.cleanup, deadline=30, what=f"cleanup() #{attempt + 1}")


@pytest.mark.clause("lifecycle.cleanup-any-thread")
def test_cleanup_from_another_thread(kit):
    task_id = kit.new_task_id("thread")
    env = kit.create(task_id, track=False)
    run(env, "true")
    errors: list[BaseException] = []

    def reaper() -> None:
        try:
            env.cleanup()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=reaper, name="kit-reaper")
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "cleanup() from another thread did not return within 30s"
    assert not errors, f"cleanup() raised on another thread: {errors[0]!r}"
    again = kit.create(task_id)
    assert out(run(again, "echo again")).strip() == "again"
    kit.release(again)


@pytest.mark.clause("lifecycle.cleanup-spares-others")
def test_cleanup_of_one_environment_leaves_the_others_working(kit, make_env):
    # Built as Hermes builds them: the kit's wrapper of Hermes's SSH environment gives every other check's
    # environment a connection of its own, so that this check alone shows what sharing one does.
    with hermes_builtins.sharing_as_hermes():
        ending, going_on = make_env(), make_env()
    for env in (ending, going_on):
        assert rc(run(env, "true")) == 0, "a fresh environment could not run `true`"
    outcome: dict[str, object] = {}

    def long_command() -> None:
        try:
            outcome["result"] = run(going_on, "sleep 2; echo still-here", timeout=30)
        except BaseException as exc:
            outcome["error"] = exc

    running = threading.Thread(target=long_command, name="kit-other-environment")
    running.start()
    time.sleep(0.5)  # the command is under way
    kit.cleanup(ending)
    running.join(45)
    assert not running.is_alive(), "the other environment's command did not return within 45 s of the cleanup"
    assert "error" not in outcome, f"the other environment's command raised: {outcome['error']!r}"
    result = outcome["result"]
    assert isinstance(result, dict), f"the other environment's execute() returned {result!r}, not a result"
    assert rc(result) == 0 and out(result).strip() == "still-here", (
        "cleanup() of one environment broke another environment's running command: it returned "
        f"rc {rc(result)} with {out(result)[-300:]!r}"
        + (
            " (ssh's own failure: the environments shared one connection, which the cleanup ended)"
            if _ssh_said(result)
            else ""
        )
    )
    after = run(going_on, "echo next")
    assert rc(after) == 0 and out(after).strip() == "next", (
        f"after another environment's cleanup, this one's next command returned rc {rc(after)}: {out(after)[-300:]!r}"
    )


def _ssh_said(result: dict[str, Any]) -> bool:
    text = out(result)
    return rc(result) == 255 or any(mark in text for mark in ("mux_client", "ControlSocket", "master"))


@pytest.mark.clause("lifecycle.persistent-flag")
def test_persistent_environment_says_so(make_env):
    env = make_env(persistent=True)
    assert is_persistent_env(env), "container_persistent true but neither _persistent nor _session_scoped is truthy"


@pytest.mark.clause("lifecycle.per-turn")
def test_three_turns_under_per_turn_teardown(kit):
    task_id = kit.new_task_id("turns")
    cache = EnvCache(lambda t: kit.create(t, persistent=None, track=False))
    try:
        for turn in range(3):
            env = cache.acquire(task_id)
            result = run(env, f"echo turn-{turn}")
            assert out(result).strip() == f"turn-{turn}", f"turn {turn}: {result!r}"
            cache.end_turn(task_id)
        assert not cache.errors, f"per-turn teardown raised: {cache.errors[0]!r}"
    finally:
        leftover = cache.get(task_id)
        if leftover is not None:  # persistent: the host keeps it; release it here
            kit.release(leftover)


@pytest.mark.clause("lifecycle.wait-for-cleanup")
def test_wait_for_cleanup_is_bounded(kit):
    env = kit.create(track=False)
    waiter = getattr(env, "wait_for_cleanup", None)
    if not callable(waiter):
        kit.cleanup(env)
        not_applicable("the environment has no wait_for_cleanup")
    run(env, "true")
    kit.cleanup(env)
    started = time.monotonic()
    bounded(waiter, timeout=2.0, deadline=3.0, what="wait_for_cleanup(timeout=2)")
    assert time.monotonic() - started < 3.0


@pytest.mark.clause("lifecycle.create-bounded")
def test_creation_is_bounded(kit):
    started = time.monotonic()
    env = bounded(kit.create, deadline=60, what="create_environment()")
    elapsed = time.monotonic() - started
    try:
        assert rc(run(env, "true")) == 0
    finally:
        kit.release(env)
    assert elapsed < 60


@pytest.mark.clause("lifecycle.gc-finalizer")
def test_garbage_collection_is_safe(kit):
    caught: list[str] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda u: caught.append(f"{u.exc_type.__name__}: {u.exc_value}")
    try:
        used = kit.create(track=False)
        run(used, "true")
        cleaned = kit.create(track=False)
        run(cleaned, "true")
        kit.cleanup(cleaned)
        del used, cleaned
        bounded(gc.collect, deadline=30, what="gc.collect() of environments")
    finally:
        sys.unraisablehook = previous
    assert not caught, f"finalizing an environment raised: {caught}"


@pytest.mark.clause("lifecycle.idle-reaper")
def test_idle_reaper_tears_down_and_the_next_command_works(kit):
    task_id = kit.new_task_id("reap")
    cache = EnvCache(lambda t: kit.create(t, track=False))
    try:
        first = cache.acquire(task_id)
        assert rc(run(first, "true")) == 0
        cache.start_reaper(interval_s=0.1, lifetime_s=0.2)
        deadline = time.monotonic() + 15
        while task_id not in cache.reaped and time.monotonic() < deadline:
            time.sleep(0.05)
        assert task_id in cache.reaped, "the reaper never finished tearing the environment down"
        assert not cache.errors, f"idle cleanup raised: {cache.errors[0]!r}"
        second = cache.acquire(task_id)
        assert second is not first, "the host's cache handed back the reaped environment (host-side fault)"
        fresh = out(run(second, "echo fresh")).strip()
        assert fresh == "fresh", f"the environment made after the idle reap does not run commands: {fresh[:200]!r}"
    finally:
        cache.shutdown(timeout=15)


@pytest.mark.clause("lifecycle.atexit")
def test_shutdown_with_a_command_in_flight(kit):
    task_id = kit.new_task_id("exit")
    cache = EnvCache(lambda t: kit.create(t, track=False))
    env = cache.acquire(task_id)
    run(env, "true")
    call = Call(env.execute, "sleep 30", timeout=60)
    time.sleep(0.5)
    started = time.monotonic()
    bounded(cache.shutdown, timeout=15.0, kill_foreground=call.interrupt, deadline=20.0, what="host shutdown")
    call.result(20.0, what="the in-flight command after shutdown")
    took = time.monotonic() - started
    assert took < 20.0, (
        f"shutdown with a command in flight took {took:.1f} s: cleanup_vm and "
        "wait_for_cleanup(15) did not end the in-flight command within the host's bound"
    )
    assert not cache.errors, f"shutdown raised: {cache.errors[0]!r}"


@pytest.mark.clause("lifecycle.delete-own-only")
def test_cleanup_deletes_only_its_own_sandbox(kit):
    task_id = kit.new_task_id("own")
    mine = kit.create(task_id, track=False)
    twin = kit.create(task_id)  # another session, same task id
    other = kit.create()
    ids = {name: locate(kit, env) for name, env in (("mine", mine), ("twin", twin), ("other", other))}
    assert len(set(ids.values())) == 3, f"sessions share sandboxes: {ids}"
    before = set(kit.world.sandboxes())
    kit.cleanup(mine)
    after = kit.world.sandboxes()
    lost = sorted((before - set(after)) - {ids["mine"]})
    assert not lost, f"cleanup of one environment deleted other sandboxes: {lost}"
    for name in ("twin", "other"):
        env = twin if name == "twin" else other
        assert rc(run(env, "true")) == 0, f"the {name} environment stopped working after another cleanup"


@pytest.mark.clause("lifecycle.gone-counts-deleted")
def test_cleanup_of_an_already_deleted_sandbox(kit):
    env = kit.create(track=False)
    sandbox = locate(kit, env)
    kit.world.delete(sandbox)
    bounded(env.cleanup, deadline=30, what="cleanup() of a deleted sandbox")


@pytest.mark.clause("lifecycle.nonpersistent-deleted")
def test_nonpersistent_cleanup_deletes_and_creates_nothing(kit):
    env = kit.create(persistent=False, track=False)
    sandbox = locate(kit, env)
    before = set(kit.world.sandboxes())
    bounded(env.cleanup, deadline=30, what="cleanup()")
    after = kit.world.sandboxes()
    assert sandbox not in after or after[sandbox] == "deleted", f"sandbox {sandbox} still exists ({after.get(sandbox)})"
    created = sorted(set(after) - before)
    assert not created, f"cleanup created sandboxes: {created}"


@pytest.mark.clause("lifecycle.persistent-kept")
def test_persistent_cleanup_keeps_the_sandbox(kit):
    env = kit.create(kit.new_task_id("keep"), persistent=True, track=False)
    sandbox = locate(kit, env)
    bounded(env.cleanup, deadline=30, what="cleanup()")
    state = kit.world.sandboxes().get(sandbox, "deleted")
    assert state != "deleted", "cleanup of a persistent environment deleted its sandbox"
