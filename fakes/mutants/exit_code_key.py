"""Returns the exit status as ``exit_code`` (the docs' example) instead of ``returncode``."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "execute() returns exit_code instead of returncode"
# Scope: every check of a non-zero status: cwd, errors, exec (and exec_properties), faults, persist, timeout;
# background jobs report exit statuses too.
SCOPE = "test_cwd or test_errors or test_exec or test_faults or test_persist or test_timeout or test_background"


class Env(TempdirBoxEnvironment):
    def execute(self, command, cwd="", **kwargs):
        result = super().execute(command, cwd, **kwargs)
        result["exit_code"] = result.pop("returncode")
        return result


provider = provider_with(Env, "exit_code_key")
# Every consumer reads a missing returncode as 0, so each check of a non-zero status fails.
# (files.fetch is not among them: the host's fetch_file also needs its fences in the output,
# so a missing file still raises FileFetchError.)
BREAKS = frozenset(
    {
        "cwd.missing-dir",
        "errors.command-not-found",
        "errors.no-raise",
        "errors.state-message",
        "exec.concurrent",
        "exec.matches-bash",
        "exec.result-shape",
        "exec.returncode-key",
        "exec.signal-exit",
        "faults.vanished-mid-command",
        "persist.error-reported",
        "timeout.interrupt-130",
        "timeout.result-124",
    }
)
