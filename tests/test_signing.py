"""Ed25519 signatures over report.json: keygen, sign, verify --signature, and clear errors for bad inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance import cli
from conformance.report import signing
from tests.report_sim import DECLARED, run


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli_run(capsys):
    """The command, run in this process: an exception escaping main() fails the test (no traceback for users)."""

    def run_cli(*args: object) -> Done:
        code = cli.main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Done(code, out, err)

    return run_cli


def test_the_command_runs_as_a_process(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "keygen", "--key", str(tmp_path / "k")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and (tmp_path / "k.pub").is_file(), done.stderr


@pytest.fixture
def signed(tmp_path, cli_run) -> dict[str, Path]:
    """A report, a key pair made by `keygen`, and the signature `sign` wrote."""
    report = tmp_path / "report.json"
    report.write_text(json.dumps(run(DECLARED), indent=2) + "\n")
    key = tmp_path / "keys" / "signing.key"
    made = cli_run("keygen", "--key", key)
    assert made.returncode == 0 and "fingerprint sha256:" in made.stdout, made.stdout + made.stderr
    assert os.stat(key).st_mode & 0o777 == 0o600
    done = cli_run("sign", report, "--key", key)
    assert done.returncode == 0, done.stderr
    signature = tmp_path / "report.json.sig"
    assert json.loads(signature.read_text())["algorithm"] == "ed25519"
    return {
        "report": report,
        "key": key,
        "public": key.with_name("signing.key.pub"),
        "signature": signature,
        "dir": tmp_path,
        "cli": cli_run,
    }


def _verify(files: dict[str, Path], **override: Path) -> Done:
    paths = {**files, **override}
    return files["cli"]("verify", paths["report"], "--signature", paths["signature"], "--public-key", paths["public"])


def test_a_signed_report_verifies(signed):
    done = _verify(signed)
    assert done.returncode == 0, done.stdout
    assert "signature: OK, the report's bytes were signed by key sha256:" in done.stdout
    assert "It cannot show" not in done.stdout


def test_a_report_changed_after_signing_fails(signed):
    report = json.loads(signed["report"].read_text())
    report["duration_s"] += 1  # still a consistent report: only the signature can tell
    signed["report"].write_text(json.dumps(report, indent=2) + "\n")
    done = _verify(signed)
    assert done.returncode == 1
    assert f"FAIL signature: {signed['report']} changed after it was signed" in done.stdout
    assert "FAIL" not in done.stdout.replace("FAIL signature", "")  # the body itself still verifies offline


def test_a_different_key_fails(signed, cli_run):
    other = signed["dir"] / "other.key"
    assert cli_run("keygen", "--key", other).returncode == 0
    done = _verify(signed, public=other.with_name("other.key.pub"))
    assert done.returncode == 1 and "FAIL signature: the signature was made by key sha256:" in done.stdout


def test_an_altered_signature_fails(signed):
    document = json.loads(signed["signature"].read_text())
    raw = bytearray(signing.base64.b64decode(document["signature"]))
    raw[0] ^= 1
    document["signature"] = signing.base64.b64encode(bytes(raw)).decode()
    signed["signature"].write_text(json.dumps(document))
    done = _verify(signed)
    assert done.returncode == 1 and "does not match" in done.stdout


@pytest.mark.parametrize(
    "break_it, message",
    [
        (lambda f: f["signature"].write_text("not json"), "is not a signature file (not JSON)"),
        (
            lambda f: f["signature"].write_text(
                json.dumps({"format": signing.SIGNATURE_FORMAT, "algorithm": "ed25519", "signature": "%%%"})
            ),
            "garbled: its signature field is not base64",
        ),
        (
            lambda f: f["public"].write_text("-----BEGIN PUBLIC KEY-----\ngarbage\n-----END PUBLIC KEY-----\n"),
            "is not a PEM or OpenSSH public key",
        ),
        (lambda f: f["public"].write_bytes(f["key"].read_bytes()), "is a private key — give the public key"),
    ],
)
def test_missing_or_garbled_signature_and_key_files_are_clear_errors(signed, break_it, message):
    break_it(signed)
    done = _verify(signed)
    failures = [line for line in done.stdout.splitlines() if line.startswith("FAIL")]
    assert done.returncode == 1 and len(failures) == 1, done.stdout
    assert failures[0].startswith("FAIL signature: ") and message.format(**signed) in failures[0], failures


@pytest.mark.parametrize(
    "missing, message",
    [
        ("signature", "signature {signature} does not exist — pass the signature file"),
        ("public", "public key {public} does not exist — pass the public key"),
    ],
)
def test_a_missing_signature_or_key_file_is_bad_input(signed, missing, message):
    """A file the command line names that is not there: exit 2 and one error line, not a failed verification."""
    signed[missing].unlink()
    done = _verify(signed)
    assert done.returncode == 2 and "FAIL" not in done.stdout, done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message.format(**signed)}"), done.stderr


def test_sign_and_keygen_errors_are_clear(signed, cli_run):
    missing = cli_run("sign", signed["report"], "--key", signed["dir"] / "nope.key")
    assert missing.returncode == 2 and "private key" in missing.stderr and "does not exist" in missing.stderr
    not_a_key = cli_run("sign", signed["report"], "--key", signed["public"])
    assert not_a_key.returncode == 2 and "is not a PEM or OpenSSH private key" in not_a_key.stderr
    again = cli_run("keygen", "--key", signed["key"])
    assert again.returncode == 2 and "keygen never overwrites a key" in again.stderr
    half = cli_run("verify", signed["report"], "--signature", signed["signature"])
    assert half.returncode == 2 and "give --signature and --public-key together" in half.stderr


def test_signature_covers_the_exact_bytes(tmp_path):
    key_path, public_path, fingerprint = signing.keygen(tmp_path / "k")
    report = tmp_path / "report.json"
    report.write_bytes(b'{"a": 1}\n')
    signature, signer = signing.sign_file(report, key_path)
    assert signer == fingerprint and signing.verify_file(report, signature, public_path) == fingerprint
    report.write_bytes(b'{"a": 1} \n')  # same JSON, other bytes
    with pytest.raises(signing.SignatureError, match="changed after it was signed"):
        signing.verify_file(report, signature, public_path)
