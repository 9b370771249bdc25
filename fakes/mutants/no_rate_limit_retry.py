"""deepinfra, but every 429 on create is taken for the account cap: never retried."""

from reference.deepinfra import sandboxes
from reference.deepinfra.provider import DeepInfraProvider

WHAT = "a rate-limited create fails at once instead of backing off and retrying"
FAKE = "deepinfra"
SCOPE = "test_transport_faults"

sandboxes.is_cap = lambda exc: True
provider = DeepInfraProvider()
BREAKS = frozenset({"faults.create-rate-limited"})
