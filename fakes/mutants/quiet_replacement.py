"""deepinfra, but a sandbox terminated behind Hermes's back is replaced without a word.

The command the service refused with a 404 runs in a new sandbox, and no
result says ``environment_recreated``: the user's files are gone and nobody
is told.
"""

from reference.deepinfra.environment import DeepInfraEnvironment
from reference.deepinfra.provider import DeepInfraProvider

WHAT = "a terminated sandbox is replaced and no result says environment_recreated"
FAKE = "deepinfra"
SCOPE = "test_persist or test_sandbox_deleted_elsewhere"

_replace = DeepInfraEnvironment._replace


def _quiet_replace(self):
    self._mark_recreated = lambda: None
    try:
        _replace(self)
    finally:
        del self._mark_recreated


DeepInfraEnvironment._replace = _quiet_replace  # type: ignore[method-assign]  # the mutation
provider = DeepInfraProvider()
BREAKS = frozenset({"persist.deleted-replaced"})
