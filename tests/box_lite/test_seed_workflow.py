"""The seed's workflow, command by command, through ``hermes-box`` in a temp home.

new alpha; write ~/workspace/f in it; save it with BOX_PASSPHRASE; plain gpg and tar list f in
the archive; load the archive as beta; beta has f; rm alpha --force; ls shows beta only.
Then the refusals a user meets first: a wrong passphrase, a truncated archive and a tar with
``../escape`` each fail with a clear message, and leave no box, registry entry or plaintext.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from isolation import NamespaceDriver
from tests.archives.craft import MANIFEST, gpg_decrypt, gpg_encrypt, plaintext_files

_OK, _WHY = NamespaceDriver(spares=0).available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"no usable namespaces here: {_WHY}")
SECRET = "seed-workflow-passphrase-91"


class HermesBox:
    """``python -m reference.box_lite.cli`` (what the hermes-box console script runs) in one home."""

    def __init__(self, home: Path, tmpdir: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if k not in ("BOX_PASSPHRASE", "HERMES_BOX_HOME")}
        self.env.update(HERMES_BOX_HOME=str(home), TMPDIR=str(tmpdir), BOX_PASSPHRASE=SECRET)

    def __call__(self, *args: str, ok: bool = True, passphrase: str = SECRET) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "BOX_PASSPHRASE": passphrase}
        proc = subprocess.run(
            [sys.executable, "-m", "reference.box_lite.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        if ok:
            assert proc.returncode == 0, f"hermes-box {' '.join(args)}: {proc.returncode}\n{proc.stdout}{proc.stderr}"
        assert passphrase not in proc.stdout + proc.stderr, "a passphrase was printed"
        return proc


@pytest.fixture
def hermes_box(box_home: Path, tmp_path: Path) -> HermesBox:
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    return HermesBox(box_home, tmpdir)


def test_the_seed_workflow(hermes_box: HermesBox, box_home: Path, tmp_path: Path):
    hermes_box("new", "alpha")
    hermes_box("exec", "alpha", "--", "sh", "-c", "echo precious > ~/workspace/f")

    saved = hermes_box("save", "alpha")
    archive = Path(saved.stdout.strip().splitlines()[-1])
    assert archive.parent == box_home / "backups" and archive.name.startswith("alpha-")
    assert archive.name.endswith(".tar.gz.gpg") and archive.is_file()

    plain = gpg_decrypt(archive, tmp_path / "gnupg", SECRET)
    listing = subprocess.run(["tar", "tz"], input=plain, capture_output=True, check=True).stdout.decode().split()
    assert "data/home/workspace/f" in listing

    hermes_box("load", str(archive), "beta")
    shown = hermes_box("exec", "beta", "--", "cat", "~/workspace/f")
    assert shown.stdout == "precious\n"
    assert hermes_box("exec", "beta", "--", "sh", "-c", "cat ~/workspace/f").stdout == "precious\n"

    hermes_box("rm", "alpha", "--force")
    listed = hermes_box("ls")
    rows = [line.split() for line in listed.stdout.splitlines()[1:] if line.strip()]
    assert [row[0] for row in rows] == ["beta"] and rows[0][1] == "running"
    assert not list((tmp_path / "tmpdir").iterdir())


def _escape_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in (("manifest.json", json.dumps(MANIFEST).encode()), ("data/../escape", b"PLAINTEXT-42")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("case", ["wrong-passphrase", "truncated", "escape"])
def test_a_bad_archive_is_refused_before_any_box_exists(
    hermes_box: HermesBox, box_home: Path, tmp_path: Path, case: str
):
    if case == "escape":
        archive = tmp_path / "escape.tar.gz.gpg"
        gpg_encrypt(_escape_tar(), archive, tmp_path / "gnupg", SECRET)
        expected = "the archive member 'data/../escape' has a '..' component"
    else:
        hermes_box("new", "alpha", "--no-doctor")
        hermes_box("exec", "alpha", "--", "sh", "-c", "head -c 400000 /dev/urandom > ~/workspace/noise")
        archive = Path(hermes_box("save", "alpha").stdout.strip().splitlines()[-1])
        if case == "truncated":
            archive.write_bytes(archive.read_bytes()[:200_000])
            expected = "the archive is truncated"
        else:
            expected = "wrong passphrase"

    refused = hermes_box(
        "load", str(archive), "beta", ok=False, passphrase="wrong-" if case == "wrong-passphrase" else SECRET
    )

    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: {archive.name}: {expected}"), refused.stderr
    assert " — " in refused.stderr.splitlines()[0], "the error line says the fix"
    assert not (box_home / "data" / "boxes" / "beta").exists()
    registry = box_home / "config" / "registry.json"
    assert "beta" not in (json.loads(registry.read_text())["boxes"] if registry.exists() else {})
    assert "beta" not in hermes_box("ls").stdout
    assert not list((tmp_path / "tmpdir").iterdir())
    assert not plaintext_files(tmp_path, b"PLAINTEXT-42")
