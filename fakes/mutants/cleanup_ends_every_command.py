"""Ends every environment's running commands when any one environment is cleaned up.

As a backend whose environments share one connection or session and whose cleanup() closes it
(Hermes's own SSH environment does this with its ControlMaster socket): another task's command
dies under it.
"""

import weakref

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment, _kill_group

WHAT = "cleanup() of one environment kills the commands every other environment is running"
SCOPE = "test_lifecycle"

_every: list[weakref.ref] = []  # every environment of the process, as one shared connection holds them


class Env(TempdirBoxEnvironment):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        _every.append(weakref.ref(self))

    def cleanup(self, force_remove: bool = False) -> None:
        for ref in list(_every):
            other = ref()
            if other is not None and other is not self:
                for leader in list(other._groups):
                    _kill_group(leader)
        super().cleanup(force_remove)


provider = provider_with(Env, "cleanup_ends_every_command")
BREAKS = frozenset({"lifecycle.cleanup-spares-others"})
