"""Clauses tempdir_box cannot reach by itself, exercised through other ways of loading it."""

from __future__ import annotations

import pytest

from fakes.services import FAKES
from tests.conftest import run_suite

# Each runs whole suites in subprocesses with their own workers; see noxfile.py.
pytestmark = pytest.mark.suite


def _install_entry_point(root, name: str) -> str:
    dist = root / "kit_tempdir-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: kit-tempdir\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[hermes_agent.plugins]\n{name} = fakes.tempdir_box\n")
    return str(root)


@pytest.mark.parametrize("name, verdict", [("tempdir-box", "pass"), ("tempdir-box-renamed", "fail")])
def test_entry_point_name_must_match_the_manifest(tmp_path, name, verdict):
    path = _install_entry_point(tmp_path / "site", name)
    run = run_suite(
        "--backend",
        f"ep:{name}",
        "--fake",
        "tempdir",
        "-k",
        "test_register",
        cwd=tmp_path,
        workers=0,
        extra_env={"PYTHONPATH": path},
    )
    verdicts = run.verdicts()
    assert verdicts["register.entry-point"] == verdict, run.output[-2000:]
    assert verdicts["register.one-provider"] == "pass"


@pytest.mark.parametrize(
    "args, message",
    [
        (("--backend", "no_such_backend_pkg"), "no module 'no_such_backend_pkg'"),
        (
            ("--fake", "nope"),
            "unknown fake 'nope' — pass --fake with one of the known fakes: " + ", ".join(sorted(FAKES)),
        ),
        (("--live", "--fake", "tempdir"), "--live and --fake exclude each other"),
        (
            ("--backend-config", "{config}"),
            "unknown key(s) terminl — use only capabilities, disclaims, env, kind, persistent_path, settings, terminal",
        ),
    ],
)
def test_setup_problems_are_one_clear_message(tmp_path, args, message):
    config = tmp_path / "backend.yaml"
    config.write_text("terminl:\n  cwd: /tmp\n")
    run = run_suite(*(a.format(config=config) for a in args), cwd=tmp_path, workers=0)
    assert run.returncode == 4, run.output[-1500:]
    assert "hermes-backend-kit: " in run.output and message in run.output
    assert "Traceback" not in run.output


def test_live_runs_are_refused_in_ci_unless_allowed(tmp_path):
    run = run_suite("--live", cwd=tmp_path, workers=0, extra_env={"CI": "true"})
    assert run.returncode == 4 and "--live refuses to run in CI" in run.output
