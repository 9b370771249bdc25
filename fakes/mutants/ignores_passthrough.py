"""upstash_box, but its commands never get Hermes's passthrough variables (and never unset any)."""

from tools.environments.base import BaseEnvironment

from fakes.mutants._base import recast
from reference.upstash_box.environment import UpstashBoxEnvironment
from reference.upstash_box.provider import UpstashBoxProvider

WHAT = (
    "skills' required variables and terminal.env_passthrough never reach the Box, and names the "
    "active profile lacks are not unset there"
)
FAKE = "upstash"
SCOPE = "test_passthrough"


class DropsPassthrough(UpstashBoxEnvironment):
    _profile_scoped_passthrough = False  # nor does it ask the host to keep the names out of the snapshot

    def _wrap_command(self, command: str, cwd: str) -> str:
        return BaseEnvironment._wrap_command(self, command, cwd)


provider = recast(UpstashBoxProvider, DropsPassthrough)
BREAKS = frozenset({"env.passthrough", "env.passthrough-unset"})
