"""tempdir_box whose cleanup() declares force_remove but ignores it: a persistent box is only paused."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "cleanup(force_remove=True) keeps a persistent box, so the prompt probe's and a user's teardown never delete it"
SCOPE = "test_force_remove or test_lifecycle or test_probe or test_a_force_removed_persistent_sandbox"


class Env(TempdirBoxEnvironment):
    def cleanup(self, force_remove: bool = False) -> None:
        super().cleanup()


provider = provider_with(Env, "force_remove_ignored")
BREAKS = frozenset(
    {
        "lifecycle.force-remove",
    }
)
