"""probe: the prompt builder's one-shot backend probe."""

from __future__ import annotations

import pytest

from conformance.host.drivers import prompt_probe, returncode

FIELDS = ("os", "kernel", "home", "cwd", "user")


@pytest.mark.clause("probe.prompt-probe")
def test_prompt_probe_completes_or_fails_cleanly(kit):
    outcome = prompt_probe(lambda task_id: kit.create(task_id, persistent=None))
    assert outcome.seconds < 10, f"the probe took {outcome.seconds:.1f}s"
    if outcome.error is not None:
        assert isinstance(outcome.error, Exception), f"the probe failed with {outcome.error!r}"
        return
    result = outcome.result
    assert result is not None, "prompt_probe returned neither a result nor an error"
    if returncode(result) == 0:
        missing = [f for f in FIELDS if f not in outcome.fields]
        assert not missing, f"probe output lacks {missing}: {result.get('output')!r}"
    else:  # a clean refusal: the host falls back to env_description
        assert result.get("output", "").strip(), f"the probe failed silently: {result!r}"


@pytest.mark.clause("probe.released")
def test_probe_environment_is_released(kit):
    world = kit.world
    before = dict(world.sandboxes()) if world is not None else {}
    outcome = prompt_probe(lambda task_id: kit.create(task_id, persistent=None, track=False))
    assert outcome.cleanup_error is None, (
        f"the probe environment's teardown (cleanup(force_remove=True) where declared) raised: "
        f"{outcome.cleanup_error!r}"
    )
    if world is not None:
        after = world.sandboxes()
        left = sorted(s for s, state in after.items() if s not in before and state == "running")
        assert not left, f"the probe left running sandboxes: {left}"
