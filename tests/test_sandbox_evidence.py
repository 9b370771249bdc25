"""Verdicts from the sandbox alone: another program's secret never decides a verdict nor reaches a report,
a live run of an unconfigured backend stops before any check, and loading a plugin never writes into the
user's home."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from tests.conftest import KIT_CLI, ROOT

pytestmark = pytest.mark.suite

PLUGINS = ROOT / "fakes" / "plugins"


def _clean_env(**extra: str) -> dict[str, str]:
    """The kit's environment without the machine's own run settings (CI changes --live)."""
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HERMES_", "TEMPDIR_BOX_")) and k != "CI"
    }
    return {**base, **extra}


def _texts(folder: Path) -> str:
    return "".join(p.read_text("utf-8", "replace") for p in folder.rglob("*") if p.is_file())


def test_another_programs_credentials_decide_nothing_and_appear_nowhere(tmp_path):
    canary = "kitcanary" + secrets.token_hex(12)
    holder = subprocess.Popen(
        ["sleep", "300"], env={"PATH": os.environ["PATH"], "DEEPINFRA_API_KEY": canary, "OPENAI_API_KEY": canary}
    )
    try:
        out = tmp_path / "out"
        done = subprocess.run(
            [
                *KIT_CLI,
                *("certify", "--backend", str(PLUGINS / "host_attached_box"), "--fake", "tempdir"),
                *("--select", "env", "--workers", "0", "--progress", "plain", "--out", str(out)),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
            env=_clean_env(),
        )
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert canary not in done.stdout + done.stderr
    assert (out / "report.json").exists() and canary not in _texts(out)


def test_a_live_run_of_a_backend_that_says_it_is_not_configured_stops_naming_what_it_needs(tmp_path):
    home = tmp_path / "user-home"
    home.mkdir()
    out = tmp_path / "out"
    done = subprocess.run(
        [*KIT_CLI, "certify", "--backend", str(PLUGINS / "unconfigured_box"), "--live", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_clean_env(HOME=str(home)),
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    first = done.stderr.strip().splitlines()[0]
    assert "not configured" in first and "UNCONFIGURED_BOX_TOKEN" in done.stderr, done.stderr
    assert "failed" not in done.stdout.lower(), "no check ran"
    assert list(home.iterdir()) == [], "register() wrote into the user's home"


def test_doctor_words_an_unavailable_backend_by_what_it_declares(tmp_path):
    home = tmp_path / "user-home"
    home.mkdir()
    done = subprocess.run(
        [*KIT_CLI, "doctor", "--backend", str(PLUGINS / "unconfigured_box"), "--live"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_clean_env(HOME=str(home)),
    )
    text = done.stdout + done.stderr
    assert done.returncode != 0
    assert "with every variable plugin.yaml requires set" not in text, text[-2000:]
    assert "declares no requires_env" in text and "UNCONFIGURED_BOX_TOKEN" in text, text[-2000:]
    assert list(home.iterdir()) == [], "doctor's load wrote into the user's home"
