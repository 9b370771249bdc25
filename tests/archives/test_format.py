"""The archive format with real gpg and tar: round trips, interoperability both ways, the manifest."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

import archives
from tests.archives.craft import (
    MANIFEST,
    PASSPHRASE,
    data_file,
    gpg_decrypt,
    gpg_encrypt,
    sample_tree,
    snapshot,
    targz,
    typed,
)

pytestmark = pytest.mark.usefixtures("tmpdir_root")
PASS = archives.Passphrase(PASSPHRASE)


def test_a_tree_round_trips_with_bytes_modes_links_and_empty_dirs(tmp_path: Path):
    tree = sample_tree(tmp_path / "tree")
    out = tmp_path / "a.tar.gz.gpg"
    written = archives.write_tree(tree, out, kind="box", name="alpha", passphrase=PASS)
    assert written.manifest.kind == "box" and written.manifest.name == "alpha"
    assert out.stat().st_mode & 0o777 == 0o600

    restored = archives.extract(out, tmp_path / "restored", PASS, kind="box")

    assert snapshot(tmp_path / "restored") == snapshot(tree)
    assert (tmp_path / "restored" / "home" / "hard").stat().st_ino == (
        tmp_path / "restored" / "home" / "workspace" / "f"
    ).stat().st_ino, "a hard link is restored as one"
    assert restored.members == written.members and restored.payload_bytes == written.payload_bytes


def test_our_archive_opens_with_gpg_decrypt_and_tar(tmp_path: Path):
    tree = sample_tree(tmp_path / "tree")
    out = tmp_path / "a.tar.gz.gpg"
    archives.write_tree(tree, out, kind="box", name="alpha", passphrase=PASS)

    plain = gpg_decrypt(out, tmp_path / "gnupg")
    listing = subprocess.run(["tar", "tz"], input=plain, capture_output=True, check=True).stdout.decode().split()
    assert listing[0] == "manifest.json"
    assert "data/home/workspace/f" in listing and "data/home/workspace/link" in listing

    (tmp_path / "by-tar").mkdir()
    subprocess.run(["tar", "xz", "-C", str(tmp_path / "by-tar")], input=plain, check=True)
    assert snapshot(tmp_path / "by-tar" / "data") == snapshot(tree)
    manifest = json.loads((tmp_path / "by-tar" / "manifest.json").read_text())
    assert manifest["format"] == 1 and manifest["kind"] == "box" and manifest["name"] == "alpha"
    assert manifest["created_at"].endswith("Z") and manifest["tools"]["gpg"] == archives.gpg_version()


def test_an_archive_made_with_tar_and_gpg_symmetric_loads(tmp_path: Path):
    tree = sample_tree(tmp_path / "build" / "data")
    (tmp_path / "build" / "manifest.json").write_text(json.dumps(MANIFEST))
    plain = subprocess.run(
        ["tar", "cz", "-C", str(tmp_path / "build"), "manifest.json", "data"], capture_output=True, check=True
    ).stdout
    archive = tmp_path / "by-gpg.tar.gz.gpg"
    gpg_encrypt(plain, archive, tmp_path / "gnupg")

    info = archives.extract(archive, tmp_path / "restored", PASS, kind="box")

    assert info.manifest.name == "alpha"
    assert snapshot(tmp_path / "restored") == snapshot(tree)


def test_extract_with_manifest_mirrors_the_archive(tmp_path: Path):
    tree = sample_tree(tmp_path / "tree")
    out = tmp_path / "a.gpg"
    archives.write_tree(tree, out, kind="box", name="alpha", passphrase=PASS)
    archives.extract(out, tmp_path / "x", PASS, with_manifest=True)
    assert json.loads((tmp_path / "x" / "manifest.json").read_text())["name"] == "alpha"
    assert (tmp_path / "x" / "manifest.json").stat().st_mode & 0o777 == 0o600
    assert snapshot(tmp_path / "x" / "data") == snapshot(tree)


def test_verify_lists_every_member_without_writing(tmp_path: Path):
    tree = sample_tree(tmp_path / "tree")
    out = tmp_path / "a.gpg"
    archives.write_tree(tree, out, kind="box", name="alpha", passphrase=PASS)
    listed: list[str] = []
    info = archives.verify(out, PASS, on_member=lambda rel, _member: listed.append(rel))
    assert "home/workspace/f" in listed and "" in listed
    assert info.members == len(listed)
    assert set(p.name for p in tmp_path.iterdir()) == {"tree", "a.gpg", "tmpdir"}


def test_progress_reports_payload_bytes_while_writing_and_archive_bytes_while_reading(tmp_path: Path):
    tree = sample_tree(tmp_path / "tree")
    out = tmp_path / "a.gpg"
    seen: list[tuple[str, int, int | None]] = []
    written = archives.write_tree(
        tree, out, kind="box", name="alpha", passphrase=PASS, progress=lambda *a: seen.append(a)
    )
    assert seen and seen[-1] == ("archive", written.payload_bytes, written.payload_bytes)
    seen.clear()
    archives.extract(out, tmp_path / "x", PASS, progress=lambda *a: seen.append(a))
    stages = [s for s, _d, _t in seen]
    assert stages[0] == "validate" and stages[-1] == "extract"
    assert seen[-1][1] == seen[-1][2] == out.stat().st_size


def test_a_tar_stream_becomes_an_archive_and_comes_back_as_a_payload_stream(tmp_path: Path):
    tree = sample_tree(tmp_path / "workspace")
    stream = subprocess.run(["tar", "cz", "-C", str(tree), "."], capture_output=True, check=True).stdout
    out = tmp_path / "ws.gpg"

    written = archives.write_stream(io.BytesIO(stream), out, kind="workspace", name="task-1", passphrase=PASS)
    assert written.manifest.kind == "workspace"
    listing = subprocess.run(["tar", "tz"], input=gpg_decrypt(out, tmp_path / "g"), capture_output=True).stdout
    assert b"data/home/workspace/f\n" in listing

    with archives.open_payload(out, PASS, kind="workspace") as payload:
        assert payload.manifest.name == "task-1"
        sent = b"".join(payload.chunks())
    names = subprocess.run(["tar", "tz"], input=sent, capture_output=True, check=True).stdout.decode().split()
    assert "home/workspace/f" in names and not any(n.startswith(("data", "/", "./")) for n in names)
    (tmp_path / "sandbox").mkdir()
    subprocess.run(["tar", "xz", "-C", str(tmp_path / "sandbox")], input=sent, check=True)
    assert snapshot(tmp_path / "sandbox") == snapshot(tree)


def test_the_payload_stream_reads_as_a_file(tmp_path: Path):
    tree = sample_tree(tmp_path / "w")
    out = tmp_path / "ws.gpg"
    archives.write_tree(tree, out, kind="workspace", name="w", passphrase=PASS)
    with archives.open_payload(out, PASS) as payload:
        parts = []
        while chunk := payload.read(1000):
            parts.append(chunk)
    with tarfile.open(fileobj=io.BytesIO(b"".join(parts)), mode="r:gz") as tar:
        f = tar.extractfile("home/workspace/f")
        assert f is not None and f.read() == b"precious\n"


def test_a_plain_tar_stream_without_a_root_entry_is_accepted(tmp_path: Path):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info, content = data_file("./notes/a.txt", b"hello")
        tar.addfile(info, io.BytesIO(content))
    raw.seek(0)
    archives.write_stream(raw, tmp_path / "w.gpg", kind="workspace", name="w", passphrase=PASS)
    archives.extract(tmp_path / "w.gpg", tmp_path / "x", PASS)
    assert (tmp_path / "x" / "notes" / "a.txt").read_bytes() == b"hello"


def test_a_box_archive_is_not_taken_for_a_workspace(tmp_path: Path):
    archives.write_tree(sample_tree(tmp_path / "t"), tmp_path / "a.gpg", kind="box", name="alpha", passphrase=PASS)
    with pytest.raises(archives.WrongKind, match="holds a box, not a workspace") as raised:
        archives.extract(tmp_path / "a.gpg", tmp_path / "x", PASS, kind="workspace")
    assert "hermes-box load" in raised.value.fix
    assert not (tmp_path / "x").exists()


def test_an_existing_archive_is_never_overwritten(tmp_path: Path):
    out = tmp_path / "a.gpg"
    out.write_bytes(b"keep me")
    with pytest.raises(archives.DestinationExists, match="already exists"):
        archives.write_tree(sample_tree(tmp_path / "t"), out, kind="box", name="a", passphrase=PASS)
    assert out.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gpg", "t", "tmpdir"], "no partial file is left"


def test_extraction_never_writes_into_a_non_empty_directory_and_accepts_an_empty_one(tmp_path: Path):
    out = tmp_path / "a.gpg"
    archives.write_tree(sample_tree(tmp_path / "t"), out, kind="box", name="a", passphrase=PASS)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine").write_text("untouched")
    with pytest.raises(archives.DestinationExists):
        archives.extract(out, busy, PASS)
    assert [p.name for p in busy.iterdir()] == ["mine"]
    empty = tmp_path / "empty"
    empty.mkdir()
    archives.extract(out, empty, PASS)
    assert (empty / "home" / "workspace" / "f").read_text() == "precious\n"


def test_a_directory_without_write_permission_is_restored_with_its_contents(tmp_path: Path):
    members = [
        (typed("data", tarfile.DIRTYPE), None),
        (typed("data/ro", tarfile.DIRTYPE), None),
        data_file("data/ro/inside", b"x"),
    ]
    members[1][0].mode = 0o555
    archive = tmp_path / "ro.gpg"
    gpg_encrypt(targz(*members), archive, tmp_path / "g")
    archives.extract(archive, tmp_path / "x", PASS)
    assert (tmp_path / "x" / "ro").stat().st_mode & 0o777 == 0o555
    assert (tmp_path / "x" / "ro" / "inside").read_bytes() == b"x"
    (tmp_path / "x" / "ro").chmod(0o755)


def test_setuid_bits_are_dropped(tmp_path: Path):
    info, content = data_file("data/tool", b"#!/bin/sh\n", mode=0o4755)
    archive = tmp_path / "s.gpg"
    gpg_encrypt(targz((typed("data", tarfile.DIRTYPE), None), (info, content)), archive, tmp_path / "g")
    archives.extract(archive, tmp_path / "x", PASS)
    assert (tmp_path / "x" / "tool").stat().st_mode & 0o7777 == 0o755


def test_a_manifest_with_extra_fields_is_read_and_keeps_them():
    raw = json.dumps({**MANIFEST, "box": {"network": True}}).encode()
    manifest = archives.Manifest.from_bytes(raw)
    assert manifest.extra == {"box": {"network": True}}
    assert json.loads(manifest.to_bytes())["box"] == {"network": True}


def test_runs_of_zeros_are_restored_as_holes(tmp_path: Path):
    tree = tmp_path / "tree"
    tree.mkdir()
    with open(tree / "sparse", "wb") as f:
        f.write(b"head")
        f.truncate(64 * 1024 * 1024)
    archives.write_tree(tree, tmp_path / "a.gpg", kind="box", name="a", passphrase=PASS)
    archives.extract(tmp_path / "a.gpg", tmp_path / "x", PASS)
    restored = tmp_path / "x" / "sparse"
    assert restored.stat().st_size == 64 * 1024 * 1024
    assert restored.read_bytes()[:4] == b"head"
    assert restored.stat().st_blocks * 512 < 8 * 1024 * 1024, "the zeros were not written out"
