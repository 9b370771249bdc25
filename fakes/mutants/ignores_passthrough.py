"""upstash_box, but its commands never get Hermes's passthrough variables (and never unset any)."""

from typing import Any

from tools.environments.base import BaseEnvironment

from reference.upstash_box.environment import UpstashBoxEnvironment
from reference.upstash_box.provider import UpstashBoxProvider

WHAT = ("skills' required variables and terminal.env_passthrough never reach the Box, and names the "
        "active profile lacks are not unset there")
FAKE = "upstash"
SCOPE = "test_passthrough"


class DropsPassthrough(UpstashBoxEnvironment):
    _profile_scoped_passthrough = False  # nor does it ask the host to keep the names out of the snapshot

    def _wrap_command(self, command: str, cwd: str) -> str:
        return BaseEnvironment._wrap_command(self, command, cwd)


class Provider(UpstashBoxProvider):
    """The reference provider; its environments wrap commands without the passthrough prelude."""

    def create_environment(self, **kwargs: Any) -> Any:
        env = super().create_environment(**kwargs)
        if isinstance(env, UpstashBoxEnvironment):
            env.__class__ = DropsPassthrough
        return env


provider = Provider()
BREAKS = frozenset({"env.passthrough", "env.passthrough-unset"})
