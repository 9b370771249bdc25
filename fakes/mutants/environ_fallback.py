"""upstash_box, but is_available() falls back to os.environ when the secret scope refuses the read."""

import os

from reference.upstash_box import settings as config
from reference.upstash_box.provider import UpstashBoxProvider

WHAT = (
    "under profile multiplexing with no scope, is_available() reads the API key from os.environ "
    "(possibly another profile's) instead of reporting the backend unconfigured"
)
FAKE = "upstash"
SCOPE = "test_unconfigured"


class Provider(UpstashBoxProvider):
    def is_available(self) -> bool:
        try:
            return config.secret(config.KEY_VAR) is not None
        except Exception:
            return bool(os.environ.get(config.KEY_VAR))


provider = Provider()
BREAKS = frozenset({"provider.unscoped-secret"})
