"""deepinfra, but garbage collection runs cleanup() (network calls) on the collector's thread."""

from reference.deepinfra.environment import DeepInfraEnvironment
from reference.deepinfra.provider import DeepInfraProvider

WHAT = "__del__ cleans up on whatever thread the collector picked, waiting on the service"
FAKE = "deepinfra"
SCOPE = "test_transport_faults"


def _cleanup_here(self):
    try:
        self.cleanup()
    except Exception:
        pass


DeepInfraEnvironment.__del__ = _cleanup_here  # type: ignore[method-assign]  # the mutation
provider = DeepInfraProvider()
BREAKS = frozenset({"faults.silent-finalizer"})
