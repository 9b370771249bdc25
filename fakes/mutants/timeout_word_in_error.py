"""deepinfra, but an error before a command starts is raised with "ReadTimeout" in its text."""

from fakes.mutants._base import recast
from reference.deepinfra.environment import DeepInfraEnvironment
from reference.deepinfra.provider import DeepInfraProvider

WHAT = "a failed state read is raised as a ReadTimeout, which Hermes reports as the command timing out (exit 124)"
FAKE = "deepinfra"
SCOPE = "test_transport_faults or test_faults"


class SaysReadTimeout(DeepInfraEnvironment):
    def _before_execute(self) -> None:
        try:
            super()._before_execute()
        except Exception as exc:
            raise RuntimeError(f"deepinfra: ReadTimeout while preparing sandbox {self.sandbox_id}: {exc}") from None


provider = recast(DeepInfraProvider, SaysReadTimeout)
BREAKS = frozenset({"errors.no-timeout-word"})
