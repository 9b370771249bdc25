"""Certification that can be trusted: completeness, waivers, verify, certify and doctor."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import re
import subprocess
import sys

import pytest
import yaml

from conformance import backends, cli, contract, manifest, traceability
from conformance.report import verify
from conformance.waivers import WaiverError, load
from tests.conftest import run_suite
from tests.report_sim import rederive

CONTRACT = contract.load()
FUTURE = (dt.date.today() + dt.timedelta(days=30)).isoformat()


def _waivers(tmp_path, **entry) -> str:
    path = tmp_path / "waivers.yaml"
    waiver = {
        "clause": "exec.result-shape",
        "reason": "known issue",
        "issue": "https://example.invalid/i/1",
        "expires": FUTURE,
        "strict": False,
        **entry,
    }
    path.write_text(yaml.safe_dump([waiver]))
    return str(path)


def test_shipped_manifest_is_current():
    fresh = manifest.generate(traceability.collect())
    assert fresh == manifest.shipped(), "run `python -m conformance.manifest` and commit checks.manifest.json"


def test_edited_check_files_make_a_run_incomplete(monkeypatch):
    files = dict(manifest.check_files())
    files["test_exec.py"] = "0" * 64
    monkeypatch.setattr(manifest, "check_files", lambda: files)
    complete, reasons = manifest.completeness(manifest.shipped()["checks"])
    assert not complete and "check files differ from this kit version: test_exec.py" in reasons[0]


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"expires": "2020-01-01"}, "expired on 2020-01-01"),
        ({"clause": "exec.nope"}, "unknown clause 'exec.nope'"),
        ({"issue": "see slack"}, "issue must be the URL"),
        ({"strict": "yes"}, "strict must be true or false"),
    ],
)
def test_bad_waivers_are_errors_naming_the_fix(tmp_path, entry, message):
    with pytest.raises(WaiverError, match=message):
        load(_waivers(tmp_path, **entry), CONTRACT)


@pytest.mark.suite
def test_an_expired_waiver_stops_the_run(tmp_path):
    run = run_suite("--waivers", _waivers(tmp_path, expires="2020-01-01"), cwd=tmp_path, workers=0)
    assert run.returncode == 4 and "expired on 2020-01-01" in run.output


@pytest.mark.suite
def test_a_narrowed_run_is_not_certified_and_a_strict_pass_is_an_error(tmp_path):
    run = run_suite("-k", "test_exec", "--waivers", _waivers(tmp_path, strict=True), cwd=tmp_path, workers=0)
    report = run.report
    assert report["complete"] is False and report["certified"] is False
    assert any("did not run" in r for r in report["incomplete_reasons"])
    assert report["errors"] == [
        "strict waiver for exec.result-shape but the clause passes: remove the waiver (https://example.invalid/i/1)"
    ]
    assert verify.problems(report) == []


@pytest.mark.suite
@pytest.mark.full
def test_certify_with_a_waived_must_failure_and_verify(tmp_path):
    waivers = _waivers(tmp_path, clause="timeout.kills-tree", strict=True)
    out = tmp_path / "out"
    key = tmp_path / "signing.key"
    assert cli.main(["keygen", "--key", str(key)]) == 0
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.cli",
            "certify",
            "--backend",
            "fakes.mutants.no_group_kill:provider",
            "--fake",
            "tempdir",
            "--waivers",
            waivers,
            "--out",
            str(out),
            "--sign-key",
            str(key),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert {p.name for p in out.iterdir()} == {
        "report.json",
        "report.md",
        "report.html",
        "junit.xml",
        "badge.json",
        "report.json.sig",
    }
    report = json.loads((out / "report.json").read_text())
    assert proc.returncode == 0 and report["certified"] is True, proc.stdout[-2000:] + proc.stderr[-2000:]
    # a local backend against the tempdir world: every MUST clause observed, so the full profile
    assert report["profile"] == "full" and "CERTIFIED (full profile: " in proc.stdout
    assert 'name="hermes_backend_kit.profile" value="full"' in (out / "junit.xml").read_text()
    waived = [c for c in report["clauses"] if "waived" in c]
    assert [c["id"] for c in waived] == ["timeout.kills-tree"] and waived[0]["verdict"] == "fail"
    assert "WAIVED MUST timeout.kills-tree" in proc.stdout
    assert "## Waived" in (out / "report.md").read_text()
    assert "waived: known issue" in (out / "report.html").read_text()
    assert json.loads((out / "badge.json").read_text())["color"] == "brightgreen"
    # progress per contract group: the timeout group's line counts its failing (waived) check
    assert re.search(r"^timeout\s+\d+/\d+ checks\s+pass \d+ fail [1-9]\d* skip \d+", proc.stdout, re.MULTILINE), (
        proc.stdout
    )

    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "conformance.cli",
            "verify",
            str(out / "report.json"),
            "--signature",
            str(out / "report.json.sig"),
            "--public-key",
            f"{key}.pub",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0 and "signature: OK" in ok.stdout, ok.stdout
    for edit, problem in (
        (
            lambda r: r["clauses"][0].update(verdict="pass" if r["clauses"][0]["verdict"] != "pass" else "fail"),
            "summary does not match",
        ),
        (lambda r: r.update(certified=False), "certified is False (profile full) but the verdicts say True"),
        (lambda r: r["kit"].update(checks_sha256="0" * 64), "not this kit version's checks"),
        (lambda r: r["clauses"].pop(), "not the contract's clauses"),
    ):
        edited = json.loads((out / "report.json").read_text())
        edit(edited)
        assert any(problem in p for p in verify.problems(edited)), (problem, verify.problems(edited))

    # The forgery: the failing clause flipped to pass, its waiver marker dropped, everything derived recomputed.
    forged = json.loads((out / "report.json").read_text())
    clause = next(c for c in forged["clauses"] if c["id"] == "timeout.kills-tree")
    clause.update(verdict="pass")
    clause.pop("waived")
    clause.pop("reason", None)
    forged["waivers"] = []
    rederive(forged)
    assert forged["certified"] is True
    assert any(
        p.startswith("timeout.kills-tree: verdict is pass but its checks say fail") for p in verify.problems(forged)
    ), verify.problems(forged)


@pytest.mark.suite
@pytest.mark.parametrize("backend", backends.REFERENCE_BACKENDS)
def test_doctor_on_a_fake_backed_reference_backend(backend, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "conformance.cli", "doctor", "--backend", backend],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    rows = [line for line in proc.stdout.splitlines() if line.startswith(("ok  ", "FAIL"))]
    steps = [line[6:26].strip() for line in rows]
    assert steps == [
        "plugin loads",
        "is_available",
        "probe",
        "doctor_checks",
        "create environment",
        "round trip",
        "identity",
        "cleanup",
    ], proc.stdout
    assert proc.returncode == 0 and all(r.startswith("ok") for r in rows), proc.stdout
    assert "ubx_" not in proc.stdout  # never a credential
    assert "None" not in proc.stdout, proc.stdout


@pytest.mark.suite
@pytest.mark.parametrize("backend, fake", [(b.name, b.fake) for b in backends.KNOWN_BACKENDS.values()])
def test_certify_writes_four_files_that_verify(backend, fake, tmp_path):
    """Every reference backend certifies against its fake (started by the run itself)."""
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
            backend,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert {p.name for p in out.iterdir()} == {"report.json", "report.md", "report.html", "junit.xml", "badge.json"}
    assert verify.verify_file(out / "report.json") == []
    report = json.loads((out / "report.json").read_text())
    assert report["certified"] is True and report["fake"] == fake
    assert report["summary"]["must"]["fail"] == 0
    # by name, against its fake: every MUST clause observed
    assert report["profile"] == "full" and report["summary"]["must"]["unverified"] == 0
    assert json.loads((out / "badge.json").read_text())["message"].startswith("certified, full (")
    assert 'name="hermes_backend_kit.profile" value="full"' in (out / "junit.xml").read_text()


@pytest.mark.suite
@pytest.mark.full
def test_a_backend_loaded_without_a_fake_gets_no_full_certificate(tmp_path):
    """module:attr runs no fake: the MUST clauses only a world can observe are unverified, never passed,
    although their black-box checks ran and passed."""
    run = run_suite("--backend", "fakes.tempdir_box:provider", cwd=tmp_path)
    report = run.report
    assert report is not None, run.output[-3000:]
    unverified = {c.id for c in CONTRACT if c.level == "MUST" and {"world", "world-states"} & set(c.capabilities)}
    assert set(report["profiles"]["full"]["unverified"]) == unverified
    assert {c["id"] for c in report["clauses"] if c["verdict"] == "unverified" and c["level"] == "MUST"} == unverified
    assert report["profile"] != "full" and report["profiles"]["full"]["met"] is False
    assert report["certified"] is True and report["profile"] == "black-box", report["not_certified_because"]
    assert f"{len(unverified)} MUST unverified, need the full profile" in run.output
    black_box = [e for c in report["clauses"] for e in c["checks"] if e.get("black_box")]
    assert black_box and {e["outcome"] for e in black_box} == {"passed"}
    assert report["undeclared"] == []  # tempdir_box declares all it offers
    assert verify.problems(report) == []


@pytest.mark.suite
@pytest.mark.full
@pytest.mark.parametrize(
    "mutant, check",
    [
        ("deletes_by_task", "test_black_box.py::test_cleanup_leaves_other_sessions_running_with_their_files"),
        ("silent_recreate", "test_black_box.py::test_sandbox_deleted_elsewhere_is_reported_then_replaced"),
    ],
)
def test_certify_without_a_world_catches_what_the_world_based_checks_would(mutant, check, tmp_path, builtin_host):
    """Loaded by module:attr (no fake, so no world): a black-box check fails the clause the mutant breaks."""
    module = importlib.import_module(f"fakes.mutants.{mutant}")
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
            f"fakes.mutants.{mutant}:provider",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    report = json.loads((out / "report.json").read_text())
    assert proc.returncode == 1 and report["certified"] is False, proc.stdout[-2000:]
    assert report["fake"] is None and "world" not in report["backend"]["capabilities"]
    failed = {c["id"]: c for c in report["clauses"] if c["verdict"] == "fail"}
    assert set(failed) == set(module.BREAKS), f"{module.WHAT}: {sorted(failed)}"
    (clause,) = failed.values()
    assert [e["id"] for e in clause["checks"] if e["outcome"] == "failed"] == [check]
    assert report["not_certified_because"] == [f"MUST clause {clause['id']} failed"]
    assert "NOT CERTIFIED" in proc.stdout and json.loads((out / "badge.json").read_text())["color"] == "red"
    assert verify.verify_file(out / "report.json") == []


@pytest.mark.suite
@pytest.mark.full
def test_an_undeclared_capability_with_signs_is_probed_and_its_failure_refuses_the_certificate(tmp_path):
    """misnamed_persistent sets self.persistent, Hermes reads _persistent, and it declares no persistence."""
    run = run_suite("--backend", "fakes.mutants.misnamed_persistent:provider", cwd=tmp_path)
    report = run.report
    assert report is not None, run.output[-3000:]
    assert report["backend"]["declared_capabilities"] == ["file-sync", "stdin-stream"]
    signs = report["backend"]["undeclared_capabilities"]["persistence"]
    assert any(
        s.startswith("sets self.persistent (Hermes reads _persistent) (fakes.mutants.misnamed_persistent:")
        for s in signs
    ), signs
    (entry,) = report["undeclared"]
    assert entry["capability"] == "persistence" and entry["probe"] == "failed"
    assert entry["must_failed"] == ["lifecycle.persistent-flag"]
    assert "persist.state-survives" in entry["passed"]  # its own teardown keeps the box: only the flag is wrong
    assert report["certified"] is False
    assert report["not_certified_because"] == [
        "MUST clause lifecycle.persistent-flag failed (probe of undeclared capability persistence: the backend "
        "shows signs of it; declare persistence and fix this, or disclaim it)"
    ]
    assert "undeclared capability persistence (signs: sets self.persistent" in run.output
    assert "probe failed 1 clause(s) (lifecycle.persistent-flag), 1 of them MUST" in run.output
    assert verify.problems(report) == []
