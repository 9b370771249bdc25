"""deepinfra, but create_environment takes any workspace_binding without checking it."""

from typing import Any

from reference.deepinfra.provider import DeepInfraProvider

WHAT = "create_environment names workspace_binding but never validates it, so a forged or wrong value is used"
FAKE = "deepinfra"
SCOPE = "test_workspace_binding"


class Provider(DeepInfraProvider):
    def create_environment(self, *, workspace_binding: Any = None, **kwargs: Any) -> Any:
        return super().create_environment(**kwargs)


provider = Provider()
BREAKS = frozenset({"provider.workspace-binding-checked"})
