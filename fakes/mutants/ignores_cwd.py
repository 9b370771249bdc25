"""Ignores the cwd argument of execute() and always runs in env.cwd."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "execute(cmd, cwd=D) runs in env.cwd instead of D"


class Env(TempdirBoxEnvironment):
    def execute(self, command, cwd="", **kwargs):
        return super().execute(command, "", **kwargs)


provider = provider_with(Env, "ignores_cwd")
BREAKS = frozenset({
    "cwd.explicit",
    "cwd.missing-dir",
    "cwd.odd-names",
})
