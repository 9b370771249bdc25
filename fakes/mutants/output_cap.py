"""Drops every byte of output after the first MiB."""

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "output after 1 MiB is silently dropped"
# Scope: every check comparing whole outputs, and the file checks, whose 2 MiB write is read back through
# output.
SCOPE = "test_exec_properties or test_output or test_stdin or test_timeout or test_files"
CAP = 1024 * 1024


class Env(TempdirBoxEnvironment):
    def _run_bash(self, cmd_string, *, login=False, timeout=120, stdin_data=None):
        capped = f"exec > >(head -c {CAP}; cat > /dev/null) 2>&1\n{cmd_string}"
        return super()._run_bash(capped, login=login, timeout=timeout, stdin_data=stdin_data)


provider = provider_with(Env, "output_cap")
# The cap also loses what is buffered when a command is killed (partial output).
BREAKS = frozenset(
    {
        "exec.matches-bash",
        "output.full-fidelity",
        "stdin.matches-bash",
        "timeout.partial-output",
    }
)
