"""Keeps its persistent mode in ``self.persistent``, where Hermes reads ``_persistent``, and does not
declare persistence.

Its own teardown keeps a persistent box, so files survive; but Hermes's per-turn teardown finds no
truthy ``_persistent`` and tears every persistent workspace down after each turn.  The kit must find
the signs of persistence, probe it although it is undeclared, and refuse the certificate.
"""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "sets self.persistent instead of _persistent and declares no persistence"
# Scope: the flag check, and every check of a persistent sandbox (kept, found again, force-removed).
SCOPE = "test_lifecycle or test_persist or test_identity or test_force_remove"


class Env(TempdirBoxEnvironment):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.persistent = self._persistent
        self._persistent = False

    def cleanup(self):  # type: ignore[override]  # no force_remove: adding it would change how the host calls it
        self._persistent = self.persistent  # its own teardown reads its own name
        try:
            super().cleanup()
        finally:
            self._persistent = False


provider = provider_with(Env, "misnamed_persistent")
provider.conformance_capabilities = frozenset({"stdin-stream", "file-sync"})  # persistence left undeclared
BREAKS = frozenset(
    {
        "lifecycle.persistent-flag",
    }
)
