"""tempdir_box that sends undeliverable stdin with the bad characters replaced, and says nothing."""

import subprocess
import threading

from fakes.mutants._base import provider_with
from fakes.tempdir_box.environment import TempdirBoxEnvironment

WHAT = "stdin_data with a lone surrogate is sent with '?' in its place and the write reported as a success"
SCOPE = "test_stdin"


class Env(TempdirBoxEnvironment):
    @staticmethod
    def _feed(proc: subprocess.Popen, data: str) -> threading.Thread:
        def write() -> None:
            try:
                try:
                    payload = data.encode("utf-8", "surrogateescape")
                except UnicodeEncodeError:
                    payload = data.encode("utf-8", "replace")
                proc.stdin.buffer.write(payload)  # type: ignore[union-attr]
            except OSError:
                pass
            finally:
                try:
                    proc.stdin.close()  # type: ignore[union-attr]
                except OSError:
                    pass

        thread = threading.Thread(target=write, daemon=True, name="mutant-stdin")
        thread.start()
        return thread


provider = provider_with(Env, "stdin_error_swallowed")
BREAKS = frozenset(
    {
        "stdin.error-reported",
    }
)
