"""Returns the exit status as ``exit_code`` (the docs' example) instead of ``returncode``."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "execute() returns exit_code instead of returncode"


class Env(TempdirBoxEnvironment):
    def execute(self, command, cwd="", **kwargs):
        result = super().execute(command, cwd, **kwargs)
        result["exit_code"] = result.pop("returncode")
        return result


provider = provider_with(Env, "exit_code_key")
BREAKS: frozenset[str] = frozenset()
