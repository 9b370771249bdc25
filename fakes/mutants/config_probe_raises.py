"""tempdir_box, but probe_with_config() indexes its setting and raises when the settings lack it."""

from typing import Any

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "probe_with_config() reads config['persistent_default'] and raises KeyError for settings without it"
SCOPE = "test_provider_config"

provider = provider_with(TempdirBoxEnvironment, "config_probe_raises")


def _probe_with_config(config: Any) -> tuple[str, str]:
    keep = config["persistent_default"]
    return ("ready", f"boxes are {'kept' if keep else 'deleted'} by default")


provider.probe_with_config = _probe_with_config  # type: ignore[method-assign]
BREAKS = frozenset({"provider.probe-with-config"})
