"""Box Lite's save, load and extract with real boxes, real gpg and a temp home.

A refused load leaves no box, no registry entry and no plaintext anywhere under the test's root
(the home and TMPDIR); a save is a verified archive that plain gpg and tar read.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

import archives
from isolation import NamespaceDriver
from reference.box_lite import backup
from reference.box_lite.boxes import BoxManager
from reference.box_lite.errors import ArchiveRefused, BoxExists
from tests.archives.craft import (
    MANIFEST,
    PASSPHRASE,
    data_file,
    gpg_decrypt,
    gpg_encrypt,
    plaintext_files,
    targz,
    typed,
)
from tests.box_lite.conftest import box_processes

_OK, _WHY = NamespaceDriver(spares=0).available()
pytestmark = pytest.mark.skipif(not _OK, reason=f"no usable namespaces here: {_WHY}")
PASS = archives.Passphrase(PASSPHRASE)
MARK = "PLAINTEXT-MARKER-c41d"


def sh(manager: BoxManager, name: str, script: str) -> str:
    command = manager.popen(name, ["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = command.communicate(timeout=60)
    assert command.returncode == 0, out
    return out.decode()


def assert_no_box(manager: BoxManager, box_home: Path, name: str) -> None:
    """No trace of box ``name``: no state, directory, registry entry, runtime files or processes."""
    assert manager.state(name) is None
    assert not (box_home / "data" / "boxes" / name).exists()
    registry = box_home / "config" / "registry.json"
    assert name not in (json.loads(registry.read_text())["boxes"] if registry.exists() else {})
    assert not any(what.endswith(f" of {name}") for what in box_processes(box_home))


def assert_no_plaintext(root: Path, *, allowed: tuple[Path, ...] = ()) -> None:
    hits = [p for p in plaintext_files(root, MARK.encode()) if not any(p.is_relative_to(a) for a in allowed)]
    assert not hits, f"plaintext left: {hits}"


def crafted_archive(tmp_path: Path, *members, manifest=MANIFEST) -> Path:
    """An archive made by tar-like code and gpg --symmetric: a root, a marked file, then ``members``."""
    plain = targz(
        (typed("data", tarfile.DIRTYPE), None),
        data_file("data/marked", MARK.encode() * 50),
        *members,
        manifest=manifest,
    )
    out = tmp_path / "crafted.tar.gz.gpg"
    gpg_encrypt(plain, out, tmp_path / "gnupg")
    return out


@pytest.fixture
def alpha(manager: BoxManager) -> str:
    manager.create("alpha")
    sh(
        manager,
        "alpha",
        f"echo precious > ~/workspace/f && echo {MARK} > ~/workspace/marked && chmod 0640 ~/workspace/f"
        " && ln -s f ~/workspace/link && mkdir -p ~/workspace/empty && printf '#!/bin/sh\\n' > ~/workspace/run.sh"
        " && chmod 0755 ~/workspace/run.sh",
    )
    return "alpha"


def test_save_writes_a_verified_archive_that_gpg_and_tar_read(
    manager: BoxManager, box_home: Path, alpha: str, tmp_path: Path
):
    path = backup.save(manager, alpha, passphrase=PASS)

    assert path.parent == box_home / "backups"
    assert path.name.startswith("alpha-") and path.name.endswith(".tar.gz.gpg")
    assert path.stat().st_mode & 0o777 == 0o600
    assert (last := manager.info(alpha).last_backup) is not None and last.path == path
    listing = subprocess.run(["tar", "tz"], input=gpg_decrypt(path, tmp_path / "g"), capture_output=True).stdout
    names = listing.decode().split()
    assert names[0] == "manifest.json" and "data/home/workspace/f" in names
    assert archives.verify(path, PASS).manifest.name == "alpha"
    assert manager.state(alpha) == "running"
    assert sh(manager, alpha, "cat ~/workspace/f") == "precious\n", "the box runs on after its save"


def test_unsaveable_links_are_those_the_archive_rule_refuses(tmp_path: Path):
    """Absolute links and links climbing out of /data, named as the box sees them; links are not followed."""
    data = tmp_path / "data"
    (data / "home" / "workspace" / "sub").mkdir(parents=True)
    links = {
        "home/workspace/ok": "f",  # inside
        "home/workspace/sub/deep": "../../../y",  # data/y: inside
        "home/workspace/abs": "/usr/bin/python3",
        "home/workspace/up": "../../../x",  # data/../x
        "linkdir": "/etc",  # a link to a directory: refused, never walked into
        "top": "../outside",
    }
    for rel, target in links.items():
        os.symlink(target, data / rel)
    scan = backup.unsaveable_links(data)
    assert scan.complete
    assert sorted(scan.links) == [
        ("/data/linkdir", "/etc"),
        ("/data/top", "../outside"),
        ("/home/agent/workspace/abs", "/usr/bin/python3"),
        ("/home/agent/workspace/up", "../../../x"),
    ]
    with pytest.raises(archives.EscapingLink):  # the archive writer refuses the same tree
        archives.write_tree(data, tmp_path / "a.gpg", kind="box", name="t", passphrase=PASS)
    assert not backup.unsaveable_links(data, seconds=0).complete


# Each link's own text stays inside /data; followed as the system follows them, d is /data itself,
# e two levels above it, and g the box home's registry.
CHAIN = {"a/b/d": "../..", "a/b/e": "d/../..", "g": "a/b/e/../config/registry.json"}


def test_a_chain_of_links_that_climbs_out_is_named_by_save(tmp_path: Path):
    data = tmp_path / "data"
    (data / "a" / "b").mkdir(parents=True)
    for rel, target in CHAIN.items():
        os.symlink(target, data / rel)
    assert sorted(backup.unsaveable_links(data).links) == [
        ("/data/a/b/e", "d/../.."),
        ("/data/g", "a/b/e/../config/registry.json"),
    ]
    with pytest.raises(archives.EscapingLink, match=r"data/g -> a/b/e/\.\./config/registry\.json \(through data/a/b/e"):
        archives.write_tree(data, tmp_path / "a.gpg", kind="box", name="t", passphrase=PASS)
    assert not (tmp_path / "a.gpg").exists()


def test_a_chain_of_links_that_climbs_out_is_refused_by_load_and_extract(
    manager: BoxManager, box_home: Path, tmp_path: Path
):
    # Made by hand: the links on disk, then tar (which stores links as links) and gpg --symmetric.
    build = tmp_path / "build"
    (build / "data" / "a" / "b").mkdir(parents=True)
    for rel, target in CHAIN.items():
        os.symlink(target, build / "data" / rel)
    (build / "manifest.json").write_text(json.dumps(MANIFEST))
    plain = subprocess.run(["tar", "cz", "-C", str(build), "manifest.json", "data"], capture_output=True, check=True)
    archive = tmp_path / "chain.tar.gz.gpg"
    gpg_encrypt(plain.stdout, archive, tmp_path / "gnupg")
    with pytest.raises(ArchiveRefused, match=r"data/g -> a/b/e/\.\./config/registry\.json") as raised:
        backup.load(manager, archive, "beta", passphrase=PASS)
    assert isinstance(raised.value.__cause__, archives.EscapingLink)
    assert_no_box(manager, box_home, "beta")
    with pytest.raises(ArchiveRefused, match=r"data/g -> "):
        backup.extract(manager.home, archive, passphrase=PASS)
    assert list((box_home / "backups").iterdir()) == []


def test_save_never_overwrites_and_two_saves_get_two_names(manager: BoxManager, alpha: str, tmp_path: Path):
    taken = tmp_path / "taken.gpg"
    taken.write_text("mine")
    with pytest.raises(BoxExists, match="already exists"):
        backup.save(manager, alpha, out=taken, passphrase=PASS)
    assert taken.read_text() == "mine"
    first = backup.save(manager, alpha, passphrase=PASS)
    second = backup.save(manager, alpha, passphrase=PASS)
    assert first != second and first.exists() and second.exists()


def test_save_of_a_stopped_box(manager: BoxManager, alpha: str, tmp_path: Path):
    manager.stop(alpha)
    out = backup.save(manager, alpha, out=tmp_path / "stopped.gpg", passphrase=PASS)
    assert archives.verify(out, PASS).members > 3
    assert manager.state(alpha) == "stopped"


def test_load_restores_bytes_modes_and_links_into_a_new_box(manager: BoxManager, alpha: str):
    path = backup.save(manager, alpha, passphrase=PASS)

    info = backup.load(manager, path, "beta", passphrase=PASS)

    assert info.state == "running"
    assert sh(manager, "beta", "cat ~/workspace/f") == "precious\n"
    modes = sh(manager, "beta", "cd ~/workspace && stat -c '%n %a %F' f run.sh empty && readlink link")
    assert "f 640 regular file" in modes and "run.sh 755 regular file" in modes and "empty" in modes
    assert modes.strip().endswith("f")
    assert sh(manager, "beta", "touch ~/workspace/new && echo ok") == "ok\n", "the restored /data is the box's"
    profile = sh(manager, "beta", "cat ~/.profile")
    assert "beta" in profile, "the managed assets are refreshed for the new box"


def test_an_archive_made_with_tar_and_gpg_loads_into_a_box(manager: BoxManager, tmp_path: Path):
    build = tmp_path / "build"
    (build / "data" / "home" / "workspace").mkdir(parents=True)
    (build / "data" / "home" / "workspace" / "f").write_text("made by hand\n")
    (build / "manifest.json").write_text(json.dumps(MANIFEST))
    plain = subprocess.run(["tar", "cz", "-C", str(build), "manifest.json", "data"], capture_output=True, check=True)
    archive = tmp_path / "by-hand.tar.gz.gpg"
    gpg_encrypt(plain.stdout, archive, tmp_path / "gnupg")

    backup.load(manager, archive, "gamma", passphrase=PASS)

    assert sh(manager, "gamma", "cat ~/workspace/f") == "made by hand\n"


def test_load_into_an_existing_name_is_refused_before_any_passphrase(
    manager: BoxManager, alpha: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.delenv("BOX_PASSPHRASE", raising=False)
    with pytest.raises(BoxExists, match="box alpha already exists"):
        backup.load(manager, Path("/nonexistent.gpg"), alpha)


REFUSALS = {
    "wrong-passphrase": ("wrong passphrase", archives.WrongPassphrase),
    "truncated": ("truncated", archives.CorruptArchive),
    "parent": ("'..' component", archives.ParentReference),
    "absolute": ("absolute path", archives.AbsolutePath),
    "symlink": ("points to the absolute path", archives.EscapingLink),
    "device": ("device file", archives.SpecialFile),
    "size": ("more than the limit of 1.0 KiB", archives.TooLarge),
    "workspace": ("holds a workspace, not a box", archives.WrongKind),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_load_leaves_no_box_no_registry_entry_and_no_plaintext(
    manager: BoxManager, box_home: Path, tmp_path: Path, tmpdir_root: Path, case: str
):
    words, cause = REFUSALS[case]
    passphrase = PASS
    if case == "wrong-passphrase":
        archive = crafted_archive(tmp_path)
        passphrase = archives.Passphrase("not the one")
    elif case == "truncated":
        archive = crafted_archive(tmp_path, data_file("data/noise", os.urandom(300_000)))
        archive.write_bytes(archive.read_bytes()[:150_000])
    elif case == "parent":
        archive = crafted_archive(tmp_path, data_file("data/../escape", b"x"))
    elif case == "absolute":
        archive = crafted_archive(tmp_path, data_file("/tmp/escape", b"x"))
    elif case == "symlink":
        archive = crafted_archive(tmp_path, (typed("data/out", tarfile.SYMTYPE, "/etc"), None))
    elif case == "device":
        archive = crafted_archive(tmp_path, (typed("data/null", tarfile.CHRTYPE), None))
    elif case == "size":
        (box_home / "config").mkdir(parents=True, exist_ok=True)
        (box_home / "config" / "box.env").write_text("SAVE_SIZE_LIMIT=1024\n")
        manager = BoxManager(manager.home)
        archive = crafted_archive(tmp_path)
    else:
        archive = crafted_archive(tmp_path, manifest={**MANIFEST, "kind": "workspace"})

    with pytest.raises(ArchiveRefused) as raised:
        backup.load(manager, archive, "beta", passphrase=passphrase)

    assert words in str(raised.value) and archive.name in raised.value.what
    assert isinstance(raised.value.__cause__, cause)
    assert raised.value.exit_code == 2
    assert_no_box(manager, box_home, "beta")
    assert not list(tmpdir_root.iterdir())
    assert_no_plaintext(tmp_path)


def test_an_archive_changed_between_validation_and_restore_leaves_no_box(
    manager: BoxManager, box_home: Path, alpha: str, tmp_path: Path, tmpdir_root: Path
):
    path = backup.save(manager, alpha, out=tmp_path / "a.gpg", passphrase=PASS)
    other = crafted_archive(tmp_path)
    swapped = False

    def swap_when_validated(done: int, total: int | None) -> None:
        nonlocal swapped
        if not swapped and total is not None and done == total:
            os.replace(other, path)  # the validating pass has read it all; the restore reads another file
            swapped = True

    with pytest.raises(ArchiveRefused, match="changed while it was being read"):
        backup.load(manager, path, "beta", passphrase=PASS, progress=swap_when_validated)
    assert swapped
    assert_no_box(manager, box_home, "beta")
    assert_no_plaintext(tmp_path, allowed=(box_home / "data" / "boxes" / "alpha",))


def test_extract_writes_a_new_private_directory_under_backups(manager: BoxManager, box_home: Path, alpha: str):
    path = backup.save(manager, alpha, passphrase=PASS)

    first = backup.extract(manager.home, path, passphrase=PASS)
    second = backup.extract(manager.home, path, passphrase=PASS)

    assert first.parent == second.parent == box_home / "backups" and first != second
    assert first.stat().st_mode & 0o777 == 0o700
    assert json.loads((first / "manifest.json").read_text())["name"] == "alpha"
    assert (first / "data" / "home" / "workspace" / "f").read_text() == "precious\n"
    assert os.readlink(first / "data" / "home" / "workspace" / "link") == "f"
    last = manager.info(alpha).last_backup
    assert last is not None and last.path == path, "an extracted directory is not taken for a backup"


def test_a_refused_extract_leaves_no_directory(manager: BoxManager, box_home: Path, tmp_path: Path):
    archive = crafted_archive(tmp_path, data_file("data/../escape", b"x"))
    with pytest.raises(ArchiveRefused, match=r"'\.\.' component"):
        backup.extract(manager.home, archive, passphrase=PASS)
    assert list((box_home / "backups").iterdir()) == []
    assert_no_plaintext(tmp_path)
