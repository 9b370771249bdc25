"""Shared helpers for the kit's own tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance import suite_command

# The kit's tests build environments outside a kit run too (reference backends, tempdir boxes), and
# their sync and cleanup read and write the Hermes home: never the user's.  The session gets one of
# its own, made before the xdist workers start (they and every child inherit it), removed at the end.
_OWN_HERMES_HOME = "KIT_TESTS_OWN_HERMES_HOME"


def pytest_configure(config: pytest.Config) -> None:
    if "HERMES_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix="kit-tests-hermes-home-")
        os.environ["HERMES_HOME"] = os.environ[_OWN_HERMES_HOME] = home


def pytest_unconfigure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return
    home = os.environ.pop(_OWN_HERMES_HOME, None)
    if home is not None and os.environ.get("HERMES_HOME") == home:
        del os.environ["HERMES_HOME"]
        shutil.rmtree(home, ignore_errors=True)


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


KIT_CLI = (sys.executable, "-W", "ignore::DeprecationWarning", "-m", "conformance.cli")


@dataclass
class Certified:
    done: subprocess.CompletedProcess[str]
    report: dict[str, Any] | None

    def output(self) -> str:
        return self.done.stdout[-3000:] + self.done.stderr[-2000:]

    def verdicts(self) -> dict[str, str]:
        assert self.report is not None, f"no report was written:\n{self.output()}"
        return {c["id"]: c["verdict"] for c in self.report["clauses"]}


def certify(*args: object, out: Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> Certified:
    """`hermes-backend-kit certify ARGS --progress off --out OUT` in a fresh process, and its report."""
    done = subprocess.run(
        [*KIT_CLI, "certify", *map(str, args), "--progress", "off", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=env,
    )
    path = out / "report.json"
    return Certified(done, json.loads(path.read_text()) if path.exists() else None)


@pytest.fixture(scope="session")
def builtin_host():
    from conformance.host import abi

    return abi.install("builtin")
