"""tempdir_box, but resolve_config() returns the settings as a list of pairs."""

from typing import Any

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "resolve_config() returns sorted (key, value) pairs, so the host's validated_config() raises TypeError"
SCOPE = "test_provider_config"

provider = provider_with(TempdirBoxEnvironment, "config_resolve_not_mapping")


def _resolve_config(config: Any) -> Any:
    return sorted(dict(config).items())


provider.resolve_config = _resolve_config  # type: ignore[method-assign]
BREAKS = frozenset({"provider.resolve-config"})
