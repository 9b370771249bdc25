"""deepinfra, but an error before a command starts is raised with "ReadTimeout" in its text.

It reads the sandbox's state before each command (as many plugins do) and
raises when the read fails or the sandbox is not running, naming an SDK
timeout class although nothing timed out.
"""

from fakes.mutants._base import recast
from reference.deepinfra.environment import DeepInfraEnvironment
from reference.deepinfra.provider import DeepInfraProvider

WHAT = "a failed or unusable state read is raised as a ReadTimeout, which Hermes reports as the command timing out"
FAKE = "deepinfra"
SCOPE = "test_transport_faults or test_faults"


class SaysReadTimeout(DeepInfraEnvironment):
    def _before_execute(self) -> None:
        super()._before_execute()
        try:
            state = self._account.state(self._sandbox)
        except Exception as exc:
            state = f"unknown ({exc})"
        if state != "running":
            raise RuntimeError(f"deepinfra: ReadTimeout while preparing sandbox {self.sandbox_id}: {state}")


provider = recast(DeepInfraProvider, SaysReadTimeout)
BREAKS = frozenset({"errors.no-timeout-word"})
