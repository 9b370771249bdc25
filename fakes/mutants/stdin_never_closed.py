"""Writes stdin_data but never closes the pipe, so readers never see EOF."""

import threading

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "stdin is written but never closed"
# Scope: every check that streams stdin: stdin (and stdin_error), the file tools, the kernel launch,
# execute_code.
SCOPE = "test_stdin or test_files or test_kernel or test_exec_code"
_KEEP_OPEN: list[object] = []  # holding the pipe objects keeps them from being closed by gc


class Env(TempdirBoxEnvironment):
    @staticmethod
    def _feed(proc, data):
        def write():
            try:
                proc.stdin.buffer.write(data.encode("utf-8", "surrogateescape"))
                proc.stdin.buffer.flush()
            except OSError:
                pass
            _KEEP_OPEN.append(proc.stdin)

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        return thread


provider = provider_with(Env, "stdin_never_closed")
# Everything that streams stdin and waits for EOF hangs into its timeout.
BREAKS = frozenset(
    {
        "exec.remote-kernel",  # the kernel's files are shipped through stdin
        "files.large-write",
        "files.odd-paths",
        "files.read-probe",
        "files.write-read",
        "stdin.control-bytes",
        "stdin.eof",
        "stdin.error-reported",
        "stdin.large",
        "stdin.matches-bash",
        "stdin.roundtrip",
        "stdin.surrogateescape",
    }
)
