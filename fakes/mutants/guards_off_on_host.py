"""tempdir_box claiming skip_container_guards although its boxes are directories on this machine."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.box_provider import TempdirBoxProvider
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "skip_container_guards is true (the ABC's default for a container) while every host path is reachable"
SCOPE = "test_guards"


class Provider(TempdirBoxProvider):
    @property
    def skip_container_guards(self) -> bool:
        return True


provider = provider_with(TempdirBoxEnvironment, "guards_off_on_host")
provider.__class__ = Provider
BREAKS = frozenset({"provider.skip-guards-isolated"})
