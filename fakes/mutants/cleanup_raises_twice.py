"""Raises when cleanup() is called a second time."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "a second cleanup() raises"
# Scope: the lifecycle checks (atexit, repeated cleanup, wait_for_cleanup), and the other checks that clean
# one environment up more than once: black-box cleanup, force_remove, the prompt probe.
SCOPE = "test_lifecycle or test_black_box or test_force_remove or test_probe"


class Env(TempdirBoxEnvironment):
    def cleanup(self):  # type: ignore[override]  # no force_remove: adding it would change how the host calls it
        if getattr(self, "_mutant_cleaned", False):
            raise RuntimeError("box already released")
        self._mutant_cleaned = True
        super().cleanup()


provider = provider_with(Env, "cleanup_raises_twice")
# The atexit path calls wait_for_cleanup() after cleanup(), which cleans up again.
BREAKS = frozenset(
    {
        "lifecycle.atexit",
        "lifecycle.cleanup-idempotent",
        "lifecycle.wait-for-cleanup",
    }
)
