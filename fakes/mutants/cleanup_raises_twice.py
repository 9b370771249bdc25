"""Raises when cleanup() is called a second time."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "a second cleanup() raises"


class Env(TempdirBoxEnvironment):
    def cleanup(self):
        if getattr(self, "_mutant_cleaned", False):
            raise RuntimeError("box already released")
        self._mutant_cleaned = True
        super().cleanup()


provider = provider_with(Env, "cleanup_raises_twice")
BREAKS: frozenset[str] = frozenset()
