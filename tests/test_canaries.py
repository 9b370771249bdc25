"""No secret in any artifact: credential values exported by the user never reach an output of the kit,
and exporting them changes no verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.suite

CANARIES = {
    "UPSTASH_BOX_API_KEY": "ubx_kitcanary_upstash_7Q2mX9",
    "DEEPINFRA_API_KEY": "di_kitcanary_deepinfra_4Rt8Lp",
    "HERMES_CF_TOKEN": "cf_kitcanary_cloudflare_9Wd3Kq",
    "OPENAI_API_KEY": "sk-kitcanary-openai-2Hn6Vb",
    "GITHUB_TOKEN": "ghp_kitcanary_github_5Zc1Tf",
}

# A backend that hands the canaries to the kit: is_available() returns one (a failing check prints
# it), probe() logs one, doctor_checks() prints one, and a command echoes the rest.
LEAKING_PLUGIN = """
import logging
import os

from fakes.tempdir_box.box_provider import TempdirBoxProvider

logger = logging.getLogger("leaking_box")


class LeakingProvider(TempdirBoxProvider):
    name = "leaking_box"

    def is_available(self):
        return "available with " + os.environ.get("OPENAI_API_KEY", "")

    def probe(self):
        logger.warning("probing with token %s", os.environ.get("GITHUB_TOKEN"))
        return ("ready", "")

    def doctor_checks(self):
        print("doctor sees", os.environ.get("HERMES_CF_TOKEN"))
        return [(False, "key", "rejected: " + os.environ.get("DEEPINFRA_API_KEY", ""))]


def register(ctx):
    ctx.register_terminal_environment_provider(LeakingProvider())
"""


def _env(canaries: bool) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "TEMPDIR_BOX_", "HERMES_")) and k != "CI" and k not in CANARIES
    }
    return {**env, **CANARIES} if canaries else env


def _texts(proc: subprocess.CompletedProcess, *paths: Path) -> dict[str, str]:
    found = {"stdout": proc.stdout, "stderr": proc.stderr}
    for path in paths:
        for file in [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file()):
            found[str(file)] = file.read_text(errors="replace")
    return found


def _no_canary(texts: dict[str, str]) -> None:
    for where, text in texts.items():
        leaked = [name for name, value in CANARIES.items() if value in text]
        assert not leaked, f"{where} shows the value of {leaked}"


def _certify(tmp_path: Path, label: str, canaries: bool) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / label
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "ignore::DeprecationWarning",
            "-m",
            "conformance.cli",
            "certify",
            "--backend",
            "upstash_box",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=_env(canaries),
    )
    return proc, out


def _verdicts(out: Path) -> dict[str, str]:
    report = json.loads((out / "report.json").read_text())
    return {c["id"]: c["verdict"] for c in report["clauses"]}


@pytest.mark.full
def test_certify_shows_no_canary_and_gives_the_same_verdicts(tmp_path):
    plain, plain_out = _certify(tmp_path, "plain", canaries=False)
    marked, marked_out = _certify(tmp_path, "canaries", canaries=True)
    assert (marked_out / "report.json").exists(), marked.stdout[-2000:] + marked.stderr[-2000:]
    assert {p.name for p in marked_out.iterdir()} == {
        "report.json",
        "report.md",
        "report.html",
        "junit.xml",
        "badge.json",
    }
    _no_canary(_texts(marked, marked_out, tmp_path))
    assert _verdicts(marked_out) == _verdicts(plain_out)
    assert marked.returncode == plain.returncode


def test_a_backend_that_hands_out_canaries_gets_them_masked_everywhere(tmp_path):
    plugin = tmp_path / "leaking"
    plugin.mkdir()
    (plugin / "plugin.yaml").write_text('name: leaking\nversion: "1.0"\ndescription: leaks keys\nkind: backend\n')
    (plugin / "__init__.py").write_text(LEAKING_PLUGIN)
    report, junit, log = tmp_path / "report.json", tmp_path / "junit.xml", tmp_path / "kit.log"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "conformance.checks",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--backend",
            str(plugin),
            "--fake",
            "tempdir",
            "-k",
            "test_provider",
            "--report",
            str(report),
            "--junitxml",
            str(junit),
            "-o",
            "junit_logging=all",
            "--log-file",
            str(log),
            "--log-file-level",
            "DEBUG",
            "-rA",
            "--showlocals",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
        env=_env(canaries=True),
    )
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    _no_canary(_texts(proc, report, junit, log))
    verdicts = {c["id"]: c for c in json.loads(report.read_text())["clauses"]}
    # The leaks were there to mask: the failing checks' messages carry the masked value.
    assert verdicts["provider.is-available"]["verdict"] == "fail"
    assert "available with ***" in verdicts["provider.is-available"]["reason"]
    captured = junit.read_text()
    assert "probing with token ***" in captured and "doctor sees ***" in captured
