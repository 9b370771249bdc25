"""Ignores the cwd argument of execute() and always runs in env.cwd."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "execute(cmd, cwd=D) runs in env.cwd instead of D"
# Scope: the cwd checks, the kernel (its launch cds into its directory) and execute_code, which runs in a cwd
# too.
SCOPE = "test_cwd or test_kernel or test_exec_code"


class Env(TempdirBoxEnvironment):
    def execute(self, command, cwd="", **kwargs):
        return super().execute(command, "", **kwargs)


provider = provider_with(Env, "ignores_cwd")
# The kernel's launch cds into its directory, so the session cwd follows it there; its later calls
# pass cwd="/", and run in that directory instead, which its kill removes.
BREAKS = frozenset(
    {
        "cwd.explicit",
        "cwd.missing-dir",
        "cwd.odd-names",
        "exec.remote-kernel",
    }
)
