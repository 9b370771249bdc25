"""Starts commands with the host's environment merged in."""

import os

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "the host environment (credentials included) leaks into the box"


class Env(TempdirBoxEnvironment):
    def _box_env(self):
        return {**os.environ, **super()._box_env()}


provider = provider_with(Env, "leaky_env")
BREAKS = frozenset({
    "env.no-host-leak",
    "env.strip-keys-invisible",
})
