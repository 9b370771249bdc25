"""upstash_box, but Hermes's passthrough values never reach the Box (it only unsets the names a scope lacks)."""

from tools.environments.base import BaseEnvironment

from fakes.mutants._base import recast
from reference.upstash_box.environment import UpstashBoxEnvironment
from reference.upstash_box.provider import UpstashBoxProvider

WHAT = (
    "names the active profile lacks are unset in the Box, but the variables skills require and "
    "terminal.env_passthrough lists are never exported there"
)
FAKE = "upstash"
SCOPE = "test_passthrough"


class UnsetsOnly(UpstashBoxEnvironment):
    def _wrap_command(self, command: str, cwd: str) -> str:
        from tools.environments.remote_common import prepend_unset, resolve_passthrough_env

        values, unset = resolve_passthrough_env()
        names = set(unset) | (set(values) & self.passthrough_blocked)
        return BaseEnvironment._wrap_command(self, prepend_unset(command, names), cwd)


provider = recast(UpstashBoxProvider, UnsetsOnly)
BREAKS = frozenset({"env.passthrough"})
