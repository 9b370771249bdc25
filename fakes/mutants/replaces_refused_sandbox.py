"""deepinfra, but every command the service refuses runs in a new sandbox.

The reference learns a sandbox's state from the exec's own answer: a 404
(gone) is replaced, a 409 (not running) is resumed, or reported when the
sandbox has failed.  This one replaces the sandbox for any refusal: a sandbox
stopped behind Hermes's back loses its /workspace, and a failed one is
silently swapped for a fresh one.
"""

from reference.deepinfra.environment import DeepInfraEnvironment
from reference.deepinfra.provider import DeepInfraProvider

WHAT = "a stopped or failed sandbox is replaced instead of resumed or reported"
FAKE = "deepinfra"
SCOPE = "test_persist"


def _recover(self, answer, sandbox_id):
    with self._lock:
        if sandbox_id == self.sandbox_id:
            self._replace()
        return self._sandbox


DeepInfraEnvironment._recover = _recover  # type: ignore[method-assign]  # the mutation
provider = DeepInfraProvider()
BREAKS = frozenset({"persist.paused-resumed", "persist.error-reported"})
