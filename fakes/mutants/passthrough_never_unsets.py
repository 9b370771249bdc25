"""upstash_box, but names the active profile lacks are never unset in the Box (the values are forwarded)."""

import shlex

from tools.environments.base import BaseEnvironment

from fakes.mutants._base import recast
from reference.upstash_box.environment import UpstashBoxEnvironment
from reference.upstash_box.provider import UpstashBoxProvider

WHAT = (
    "Hermes's passthrough values reach the Box, but under profile multiplexing a name the active profile "
    "lacks keeps the value an earlier command or profile left there"
)
FAKE = "upstash"
SCOPE = "test_passthrough"


class KeepsUnscopedNames(UpstashBoxEnvironment):
    _profile_scoped_passthrough = False  # the snapshot keeps what earlier commands exported

    def _wrap_command(self, command: str, cwd: str) -> str:
        from tools.environments.remote_common import resolve_passthrough_env

        values, _unset = resolve_passthrough_env()
        exports = "".join(
            f"export {name}={shlex.quote(value)}\n"
            for name, value in sorted(values.items())
            if name not in self.passthrough_blocked
        )
        return BaseEnvironment._wrap_command(self, exports + command, cwd)


provider = recast(UpstashBoxProvider, KeepsUnscopedNames)
BREAKS = frozenset({"env.passthrough-unset"})
