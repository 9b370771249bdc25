"""CleanupOffThread: a collected environment is cleaned up off-thread, and never hangs exit."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from reference.common.finalize import CleanupOffThread

ROOT = Path(__file__).resolve().parents[2]


class _Env(CleanupOffThread):
    def __init__(self, done: threading.Event):
        self.done = done

    def cleanup(self) -> None:
        self.done.set()


def test_collected_environment_is_cleaned_up():
    done = threading.Event()
    env = _Env(done)
    del env
    assert done.wait(5), "cleanup() did not run after the environment was collected"


def test_environment_alive_at_exit_does_not_hang_the_interpreter():
    # Python 3.11 cannot start a thread during finalization: Thread.start() in __del__ waited forever.
    script = (
        "from reference.common.finalize import CleanupOffThread\n"
        "class E(CleanupOffThread):\n    def cleanup(self): pass\n"
        "kept = E()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, timeout=30)
    assert proc.returncode == 0
