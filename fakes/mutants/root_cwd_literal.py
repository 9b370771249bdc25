"""upstash_box, but execute() takes Hermes's default cwd "/root" literally in a box that has no /root."""

from typing import Any

from reference.common.cwd import HermesDefaultCwd
from reference.upstash_box.provider import UpstashBoxProvider

WHAT = 'execute(cmd, cwd="/root"), as Hermes sends every command when terminal.cwd is unset, fails with cd exit 126'
FAKE = "upstash"
SCOPE = "test_cwd"


class Provider(UpstashBoxProvider):
    def create_environment(self, **kwargs: Any) -> Any:
        env = super().create_environment(**kwargs)
        skipped = super(HermesDefaultCwd, env).execute  # type: ignore[misc]  # env is an UpstashBoxEnvironment
        env.execute = skipped  # the breakage: the mapping of "/root" skipped
        return env


provider = Provider()
BREAKS = frozenset({"cwd.hermes-default"})
