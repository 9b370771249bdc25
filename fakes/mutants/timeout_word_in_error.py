"""deepinfra, but an error before a command starts is raised with "ReadTimeout" in its text."""

from typing import Any

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


class Provider(DeepInfraProvider):
    """The reference provider; its environments mislabel pre-start errors (no module is patched)."""

    def create_environment(self, **kwargs: Any) -> Any:
        env = super().create_environment(**kwargs)
        if isinstance(env, DeepInfraEnvironment):
            env.__class__ = SaysReadTimeout
        return env


provider = Provider()
BREAKS = frozenset({"errors.no-timeout-word"})
