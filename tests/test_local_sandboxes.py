"""Local sandboxes judged on their own terms: a backend that runs each command in a bubblewrap sandbox
on this machine fails only what it really lacks, and the same backend unsandboxed while it still claims
isolation is caught on an isolation clause."""

from __future__ import annotations

import json
import shutil

import pytest

from conformance import config
from conformance.errors import BackendConfigError
from tests.conftest import ROOT, certify

pytestmark = pytest.mark.suite

BWRAP_BOX = ROOT / "fakes" / "plugins" / "bwrap_box"
# One cause: every command has a PID namespace of its own, so what a command starts in the background
# (a job, the execute_code kernel) ends with it.
BACKGROUND = {
    "background.spawn",
    "background.poll",
    "background.kill",
    "timeout.command-not-sandbox",
    "exec.remote-kernel",
}


def _failed(report: dict) -> set[str]:
    return {c["id"] for c in report["clauses"] if c["verdict"] == "fail" and c["level"] == "MUST"}


@pytest.fixture
def bwrap():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap; nox -s tests installs it)")


@pytest.mark.parametrize("sandboxing, expected", [("true", BACKGROUND), ("false", {"provider.skip-guards-isolated"})])
def test_a_bubblewrap_sandbox_per_command_fails_only_what_it_lacks(tmp_path, bwrap, sandboxing, expected):
    settings = tmp_path / "backend.yaml"
    settings.write_text(f"kind: host-attached\nterminal:\n  bwrap_box_sandboxing: {sandboxing}\n")
    done = certify(
        "--backend", BWRAP_BOX, "--backend-config", settings, "--workers", "2", out=tmp_path / "out", cwd=tmp_path
    )
    assert done.report is not None, done.output()
    assert done.report["certified"] is False
    assert _failed(done.report) == expected, json.dumps(sorted(_failed(done.report)))
    assert (
        done.report["backend"]["kind"] == "host-attached" and done.report["backend"]["kind_source"] == "backend-config"
    )


def test_the_kind_is_declared_in_the_backend_config_or_by_disclaiming_a_sandbox_per_task(tmp_path):
    known = {"persistence", "stdin-stream", "file-sync"}
    for text, kind in (
        ("kind: host-attached\n", "host-attached"),
        ("kind: sandbox\n", "sandbox"),
        ("disclaims: [per-task-sandbox, file-sync]\n", "host-attached"),
        ("terminal: {}\n", None),
    ):
        path = tmp_path / "c.yaml"
        path.write_text(text)
        loaded = config.load(str(path), known)
        assert loaded.kind == kind and "per-task-sandbox" not in (loaded.disclaims or []), text
    for text, words in (
        ("kind: vm\n", "not a backend kind"),
        ("kind: sandbox\ndisclaims: [per-task-sandbox]\n", "drop one"),
    ):
        path.write_text(text)
        with pytest.raises(BackendConfigError, match=words):
            config.load(str(path), known)
