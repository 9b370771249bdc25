"""Starts commands with the host's environment merged in."""

import os

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "the host environment (credentials included) leaks into the box"
# Scope: the env checks, and the passthrough and redaction checks that also look at what reaches the box.
SCOPE = "test_env or test_passthrough or test_errors"


class Env(TempdirBoxEnvironment):
    def _box_env(self):
        return {**os.environ, **super()._box_env()}


provider = provider_with(Env, "leaky_env")
BREAKS = frozenset(
    {
        "env.no-host-leak",
        "env.strip-keys-invisible",
    }
)
