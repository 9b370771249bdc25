"""`hermes-backend-kit fake serve VENDOR` in its own process, as a user starts it by hand."""

from __future__ import annotations

import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from fakes import process

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Served:
    proc: subprocess.Popen[str]
    exports: dict[str, str]  # the variables it printed for the vendor's SDK
    control: str  # its control address
    lines: list[str]  # everything it printed up to "serving"

    def stop(self, signum: int = signal.SIGINT) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        return self.proc.wait(15)


def serve(vendor: str, *argv: str, env: dict[str, str] | None = None) -> Served:
    """Start the fake and read what it prints until it says it is serving."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "fake", "serve", vendor, *argv],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    while not lines or "fake is serving" not in lines[-1]:
        line = proc.stdout.readline()
        if not line:
            proc.wait(10)
            raise AssertionError(f"fake serve ended early: {lines} {proc.stderr.read() if proc.stderr else ''}")
        lines.append(line.rstrip("\n"))
    exports = dict(line.removeprefix("export ").split("=", 1) for line in lines if line.startswith("export "))
    prefix = f"# control: {process.CONTROL_VAR}="
    control = next((line.removeprefix(prefix) for line in lines if line.startswith(prefix)), "")
    return Served(proc, exports, control, lines)
