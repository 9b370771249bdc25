"""Wall time of the conformance suite for one backend, run as the README tells users to run it."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass

from conformance import suite_command

SUITE_TIMEOUT_S = 1800


@dataclass
class SuiteRun:
    seconds: float
    returncode: int
    summary: str  # pytest's last line: "312 passed, 4 skipped in 41.2s"


def command(backend: str, workers: int = 2) -> list[str]:
    return suite_command.command("--backend", backend, workers=workers)


def run(backend: str, env: dict[str, str]) -> SuiteRun:
    # env: the bench's environment from before any fake exported its variables into this process.
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            command(backend),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=SUITE_TIMEOUT_S,
            text=True,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        return SuiteRun(time.perf_counter() - started, -1, f"timed out after {SUITE_TIMEOUT_S}s")
    seconds = time.perf_counter() - started
    tail = [line for line in proc.stdout.splitlines() if line.strip()]
    return SuiteRun(seconds, proc.returncode, tail[-1].strip("= ") if tail else "")
