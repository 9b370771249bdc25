"""Ships a provider config schema the host rejects (a secret field with a default)."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "get_config_schema() gives a secret field a default value"
# Scope: the schema check, and the config checks next to it (test_provider matches both modules).
SCOPE = "test_provider"

provider = provider_with(TempdirBoxEnvironment, "bad_config_schema")
provider.get_config_schema = lambda: {  # type: ignore[method-assign]
    "token": {"type": "secret", "default": "tbx_example"},
    "size": {"type": "select", "options": ["small", "large"]},
}
BREAKS = frozenset(
    {
        "provider.config-schema",
    }
)
