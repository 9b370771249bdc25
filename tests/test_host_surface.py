"""Backends that use more of Hermes than the terminal ABI, on the builtin host.

config_box reads its box root only through hermes_cli.config (terminal.config_box
in the run's Hermes home), with names released Hermes has and older stand-ins
lacked (fast_safe_load, hermes_home_key, ctx.get_config(key, default));
hermes_gap_box imports a Hermes module no host has when it creates a sandbox;
misnamed_box imports a name no Hermes release has.  All are plugin directories
under fakes/plugins/.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from conformance import contract
from conformance.report import html, markdown, verify
from tests.conftest import ROOT, run_suite

PLUGINS = ROOT / "fakes" / "plugins"
GAP_MODULE = "hermes_cli.nonexistent_thing"


@pytest.mark.suite
def test_a_backend_that_reads_its_settings_through_hermes_config_certifies(tmp_path):
    boxes = tmp_path / "configured-boxes"
    config = tmp_path / "backend.yaml"
    config.write_text(
        yaml.safe_dump({"terminal": {"config_box": {"root": str(boxes)}}, "settings": {"subdir": "from-settings"}})
    )
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore::DeprecationWarning",
            "-m",
            "conformance.cli",
            "certify",
            "--backend",
            str(PLUGINS / "config_box"),
            "--backend-config",
            str(config),
            "--host",
            "builtin",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert report["certified"] is True and report["backend"]["name"] == "config_box"
    assert report["summary"]["must"]["fail"] == 0 and "gaps" not in report["host"]
    # Only the configured root, read through hermes_cli.config, names this directory; the plugin setting read
    # with ctx.get_config(key, default) the subdirectory; hermes_constants.hermes_home_key one per Hermes home.
    made = [d.name for d in (boxes / "from-settings").iterdir()]
    assert made and all(name.startswith("home-") for name in made), made
    assert verify.verify_file(out / "report.json") == []


@pytest.mark.suite
def test_a_hermes_module_the_host_lacks_is_one_note_and_unverified_clauses(tmp_path):
    run = run_suite("--backend", str(PLUGINS / "hermes_gap_box"), "--host", "builtin", cwd=tmp_path)
    report = run.report
    assert report is not None, run.output[-3000:]
    assert not run.failed(), {c["id"]: c.get("reason") for c in report["clauses"] if c["verdict"] == "fail"}
    (gap,) = report["host"]["gaps"]
    assert gap["module"] == GAP_MODULE and gap["checks"] > 0
    assert gap["note"] == (
        f"host gap: the backend imports the Hermes module {GAP_MODULE!r}, which the kit's builtin host does not "
        f"provide, so {gap['checks']} check(s) could not run and their clauses are unverified. This is the host's "
        f"gap, not a backend failure: run with --host hermes under a hermes-agent that has {GAP_MODULE}"
    )
    assert run.output.count("host gap:") == 1, run.output[-3000:]
    assert gap["note"] in " ".join(run.output.split())
    reason = (
        f"unverified (host: the backend imports the Hermes module {GAP_MODULE!r}, which the kit's builtin host "
        f"does not provide; run with --host hermes under a hermes-agent that has {GAP_MODULE})"
    )
    stopped = [e for c in report["clauses"] for e in c["checks"] if e.get("excerpt", "").startswith(reason)]
    assert len(stopped) == gap["checks"]
    unverified = {c["id"] for c in report["clauses"] if c["verdict"] == "unverified" and reason in c["reason"]}
    assert "exec.result-shape" in unverified and report["certified"] is False
    assert verify.problems(report) == []
    assert markdown.render(report, contract.load()).count(gap["note"]) == 1
    assert html.render(report, contract.load()).count("<dt>host gap</dt>") == 1


@pytest.mark.suite
def test_a_name_no_hermes_release_has_is_the_plugins_own_failure(tmp_path):
    run = run_suite(
        "--backend", str(PLUGINS / "misnamed_box"), "--host", "builtin", "-k", "test_exit_status", cwd=tmp_path
    )
    report = run.report
    assert report is not None, run.output[-3000:]
    assert "gaps" not in report["host"]
    failed = [c for c in report["clauses"] if c["verdict"] == "fail"]
    assert failed, run.output[-3000:]
    assert all("cannot import name 'load_config_everywhere'" in c["reason"] for c in failed), failed[0]["reason"]
