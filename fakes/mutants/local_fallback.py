"""A "remote" backend (is_remote = True) that silently runs every command on this machine."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "a backend that says it is remote silently runs commands locally"
# Scope: the identity checks and the passthrough prelude a remote backend owes.
SCOPE = "test_identity or test_passthrough"

provider = provider_with(TempdirBoxEnvironment, "local_fallback")
provider.is_remote = True
# Its commands also miss Hermes's passthrough prelude, which a remote backend owes them.
BREAKS = frozenset(
    {
        "identity.remote-not-local",
        "env.passthrough",
        "env.passthrough-unset",
    }
)
