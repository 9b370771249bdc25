"""Shared helpers for the kit's own tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance import suite_command

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class SuiteRun:
    returncode: int
    output: str
    report: dict[str, Any] | None

    def verdicts(self) -> dict[str, str]:
        assert self.report is not None, f"no report was written:\n{self.output[-3000:]}"
        return {c["id"]: c["verdict"] for c in self.report["clauses"]}

    def failed(self) -> set[str]:
        return {cid for cid, verdict in self.verdicts().items() if verdict == "fail"}


def run_suite(
    *args: str,
    cwd: Path,
    python: str = sys.executable,
    timeout: float = 600,
    workers: int = 2,
    extra_env: dict[str, str] | None = None,
) -> SuiteRun:
    """Run the conformance suite in a fresh process, from ``cwd``, and read its report."""
    report = cwd / "report.json"
    cmd = suite_command.command(*args, python=python, workers=workers, report=report)
    # The kit's own behaviour must not depend on the machine running it (CI changes --live).
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TEMPDIR_BOX_", "HERMES_")) and k != "CI"
    }
    env.update(extra_env or {})
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    data = json.loads(report.read_text()) if report.exists() else None
    return SuiteRun(proc.returncode, proc.stdout + proc.stderr, data)


@pytest.fixture(scope="session")
def builtin_host():
    from conformance.host import abi

    return abi.install("builtin")
