"""tempdir_box, but create_environment passes backend_config on to a constructor that does not take it."""

from typing import Any

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = (
    "create_environment forwards the keywords it does not know to the environment, which refuses "
    "backend_config with TypeError"
)
SCOPE = "test_provider_config"

provider = provider_with(TempdirBoxEnvironment, "config_rejects_backend_config")
_create = provider.create_environment


def _create_environment(**kwargs: Any) -> Any:
    if "backend_config" in kwargs:
        raise TypeError("TempdirBoxEnvironment.__init__() got an unexpected keyword argument 'backend_config'")
    return _create(**kwargs)


provider.create_environment = _create_environment  # type: ignore[method-assign]
BREAKS = frozenset({"provider.backend-config"})
