"""``hermes-backend-kit bench --backend SPEC``: any backend certify takes, measured beside a reference.

One tiny quick run (figures' shape, never their speed) of tempdir_box given
as ``module:attr`` beside tempdir_box by name, and the option rules without
a run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.bench import entries, options, suite
from conformance.errors import UsageError
from tests.test_bench import TINY

SPEC = "fakes.tempdir_box:provider"


def test_bench_of_a_spec_has_the_reference_row_and_its_own_with_the_same_figures(tmp_path):
    out = tmp_path / "results.json"
    bench = [sys.executable, "-W", "ignore::DeprecationWarning", "-m", "conformance.cli", "bench"]
    proc = subprocess.run(
        [*bench, "--backend", SPEC, *TINY, "--out", str(out)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert list(data["targets"]) == ["local", "tempdir_box", SPEC]
    reference, spec = data["targets"]["tempdir_box"], data["targets"][SPEC]
    assert set(spec["figures"]) == set(reference["figures"]) == set(data["figures"])
    measured = {k for k, f in reference["figures"].items() if f["value"] is not None}
    assert "cold_start_ms" in measured and "sync_back_s" in measured
    assert {k for k, f in spec["figures"].items() if f["value"] is not None} == measured
    assert set(spec["growth"]) == set(reference["growth"])
    assert data["options"]["specs"] == {SPEC: {"fake": "tempdir", "live": False}}  # the reference's fake
    header = next(line for line in out.with_suffix(".md").read_text().splitlines() if line.startswith("| figure |"))
    assert header == f"| figure | local bash -c (baseline) | tempdir_box | {SPEC} |"


def _args(**given: object) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    options.add_options(p)
    args = p.parse_args([])
    for key, value in given.items():
        setattr(args, key, value)
    return args


def test_a_spec_runs_on_the_reference_fake_and_certify_gets_the_same_options(tmp_path):
    config = tmp_path / "backend.yaml"
    config.write_text("env: {}\n")
    reference, spec = entries.select(_args(backend=SPEC, reference="deepinfra", backend_config=str(config)))
    assert (reference.name, reference.known) == ("deepinfra", True)
    assert spec.run_options().fake == "deepinfra" and spec.run_options().backend == SPEC
    assert spec.certify_args() == ["--fake", "deepinfra", "--backend-config", str(config.resolve())]
    (_, live) = entries.select(_args(backend=SPEC, live=True))
    assert live.certify_args() == ["--live"] and live.run_options().live and live.run_options().fake is None
    command = suite.command(spec.spec, spec.workers, tmp_path / "out", tmp_path / "c.jsonl", spec.certify_args())
    assert command[command.index("--backend") + 1] == SPEC and command[-4:] == spec.certify_args()


def test_a_plugin_directory_is_given_to_certify_as_an_absolute_path_and_named_as_given(tmp_path, monkeypatch):
    (tmp_path / "my-plugin").mkdir()
    monkeypatch.chdir(tmp_path)
    _, spec = entries.select(_args(backend="./my-plugin"))
    assert spec.spec == str(tmp_path / "my-plugin")
    assert spec.name == "./my-plugin" and spec.directory == "my-plugin", "results read the same on every machine"


def test_a_known_name_given_as_backend_is_measured_as_itself():
    assert [e.name for e in entries.select(_args(backend="deepinfra"))] == ["tempdir_box", "deepinfra"]
    assert [e.name for e in entries.select(_args(backend="tempdir_box"))] == ["tempdir_box"]


@pytest.mark.parametrize(
    "given, words",
    [
        ({"backend": SPEC, "backends": "tempdir_box"}, "exclude each other"),
        ({"backend": SPEC, "reference": "nope"}, "unknown backend 'nope'"),
        ({"reference": "deepinfra"}, "go with --backend SPEC"),
        ({"backends": "tempdir_box,nope"}, "unknown backend 'nope'"),
        ({"backend": "  "}, "--backend is empty"),
    ],
)
def test_wrong_options_are_usage_errors_naming_the_fix(given, words):
    with pytest.raises(UsageError) as caught:
        entries.select(_args(**given))
    assert words in caught.value.one_line()


def test_the_bench_command_shows_its_options(capsys):
    from conformance import cli

    with pytest.raises(SystemExit) as caught:
        cli.main(["bench", "--help"])
    assert caught.value.code == 0
    shown = capsys.readouterr().out
    assert "--backend SPEC" in shown and "--reference NAME" in shown and "--quick" in shown


def test_a_wrong_option_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "bench", "--backend", SPEC, "--backends", "tempdir_box"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "exclude each other" in proc.stderr and "Traceback" not in proc.stderr
    assert not Path(tmp_path / "bench").exists()
