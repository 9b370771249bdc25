"""upstash_box, but a command whose exec session is lost after it started raises instead of failing."""

from typing import Any

from fakes.mutants._base import recast
from reference.upstash_box import session
from reference.upstash_box.environment import UpstashBoxEnvironment
from reference.upstash_box.provider import UpstashBoxProvider

WHAT = (
    "a stream lost after the command started (connection dropped or cut mid-frame, sandbox deleted) "
    "raises, so Hermes's terminal tool runs the command again"
)
FAKE = "upstash"
SCOPE = "test_transport_faults or test_faults"
LOST = session.LOST.strip()


class LostSessionRaises(UpstashBoxEnvironment):
    def execute(self, command: str, cwd: str = "", **kwargs: Any) -> dict[str, Any]:
        result = super().execute(command, cwd, **kwargs)
        if result.get("returncode") and LOST in str(result.get("output", "")):
            raise ConnectionError(f"upstash_box: the exec session of Box {self.box_id} was lost mid-command")
        return result


provider = recast(UpstashBoxProvider, LostSessionRaises)
BREAKS = frozenset({"faults.damaged-frame", "faults.dropped-mid-command", "faults.vanished-mid-command"})
