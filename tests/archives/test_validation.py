"""Every archive that must be refused is refused with its own error, and refusing leaves nothing behind."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

import archives
from tests.archives.craft import (
    MANIFEST,
    PASSPHRASE,
    data_file,
    gpg_encrypt,
    plaintext_files,
    sample_tree,
    targz,
    typed,
)

pytestmark = pytest.mark.usefixtures("tmpdir_root")
PASS = archives.Passphrase(PASSPHRASE)
MARK = b"PLAINTEXT-MARKER-7f3a"
ROOT = (typed("data", tarfile.DIRTYPE), None)
MARKED = data_file("data/marked", MARK * 100)


def _tar(*members) -> bytes:
    return targz(ROOT, MARKED, *members)


# name -> (plaintext tar.gz, error class, words the message must hold)
UNSAFE: dict[str, tuple[bytes, type[archives.ArchiveError], str]] = {
    "parent": (_tar(data_file("data/../escape", b"x")), archives.ParentReference, "'..' component"),
    "parent-first": (_tar(data_file("../escape", b"x")), archives.ParentReference, "'..' component"),
    "absolute": (_tar(data_file("/etc/evil", b"x")), archives.AbsolutePath, "absolute path"),
    "symlink-absolute": (
        _tar((typed("data/etc", tarfile.SYMTYPE, "/etc"), None)),
        archives.EscapingLink,
        "points to the absolute path '/etc'",
    ),
    "symlink-up": (
        _tar((typed("data/a/up", tarfile.SYMTYPE, "../../outside"), None)),
        archives.EscapingLink,
        "points outside the archived tree",
    ),
    "symlink-chain": (  # each link's text stays inside; followed through d and e, g leaves the tree
        _tar(
            (typed("data/a/b", tarfile.DIRTYPE), None),
            (typed("data/a/b/d", tarfile.SYMTYPE, "../.."), None),
            (typed("data/g", tarfile.SYMTYPE, "a/b/e/../outside"), None),  # e comes later: judged at the end
            (typed("data/a/b/e", tarfile.SYMTYPE, "d/../.."), None),
        ),
        archives.EscapingLink,
        "links data/g -> a/b/e/../outside (through data/a/b/e, data/a/b/d); data/a/b/e -> d/../.. (through "
        "data/a/b/d) point outside",
    ),
    "symlink-loop": (
        _tar((typed("data/l1", tarfile.SYMTYPE, "l2/x"), None), (typed("data/l2", tarfile.SYMTYPE, "l1"), None)),
        archives.EscapingLink,
        "more than 40 links deep",
    ),
    "hardlink-out": (
        _tar((typed("data/h", tarfile.LNKTYPE, "/etc/passwd"), None)),
        archives.EscapingLink,
        "hard link",
    ),
    "hardlink-unknown": (
        _tar((typed("data/h", tarfile.LNKTYPE, "data/nothing"), None)),
        archives.EscapingLink,
        "not an earlier file",
    ),
    "through-link": (
        _tar((typed("data/d", tarfile.SYMTYPE, "."), None), data_file("data/d/x", b"x")),
        archives.UnexpectedMember,
        "goes through the link",
    ),
    "device": (_tar((typed("data/null", tarfile.CHRTYPE), None)), archives.SpecialFile, "device file"),
    "fifo": (_tar((typed("data/pipe", tarfile.FIFOTYPE), None)), archives.SpecialFile, "FIFO"),
    "outside-data": (_tar(data_file("etc/x", b"x")), archives.UnexpectedMember, "outside data/"),
    "duplicate": (_tar(data_file("data/marked", b"again")), archives.UnexpectedMember, "appears twice"),
    "no-manifest": (targz(ROOT, MARKED, manifest=None), archives.MissingManifest, "must be manifest.json"),
    "manifest-not-json": (targz(ROOT, MARKED, manifest=b"{nope"), archives.UnknownFormat, "not JSON"),
    "format-2": (targz(ROOT, MARKED, manifest={**MANIFEST, "format": 2}), archives.UnknownFormat, "format 2"),
    "not-gzip": (b"just some text, not a tar.gz", archives.CorruptArchive, "not a valid gzipped tar"),
}


def _encrypted(tmp_path: Path, plain: bytes) -> Path:
    archive = tmp_path / "in" / "x.tar.gz.gpg"
    archive.parent.mkdir(exist_ok=True)
    gpg_encrypt(plain, archive, tmp_path / "gnupg")
    return archive


def _assert_nothing_left(tmp_path: Path, dest: Path) -> None:
    assert not dest.exists(), "a refused extraction leaves no directory"
    assert not plaintext_files(tmp_path, MARK), "no plaintext anywhere under the test's root"


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_an_unsafe_archive_is_refused_with_its_own_error_and_nothing_is_written(tmp_path: Path, case: str):
    plain, error, words = UNSAFE[case]
    archive = _encrypted(tmp_path, plain)
    dest = tmp_path / "out"
    with pytest.raises(error) as raised:
        archives.extract(archive, dest, PASS)
    assert type(raised.value) is error
    assert words in str(raised.value)
    assert raised.value.fix and raised.value.why
    _assert_nothing_left(tmp_path, dest)


def test_the_size_limit_is_stated_and_enforced(tmp_path: Path):
    archive = _encrypted(tmp_path, _tar(data_file("data/big", b"\0" * 5000)))
    with pytest.raises(archives.TooLarge, match=r"more than the limit of 4\.0 KiB") as raised:
        archives.extract(archive, tmp_path / "out", PASS, limits=archives.Limits(max_bytes=4096))
    assert "data/big" in raised.value.why
    _assert_nothing_left(tmp_path, tmp_path / "out")
    with pytest.raises(archives.TooLarge, match="too many members"):
        archives.verify(archive, PASS, limits=archives.Limits(max_members=2))


def test_the_default_limit_is_stated():
    assert archives.DEFAULT_LIMITS.max_bytes == 32 * 1024**3


def _ours(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "marked").write_bytes(MARK * 30000 + os.urandom(200_000))
    archive = tmp_path / "in" / "ours.tar.gz.gpg"
    archive.parent.mkdir()
    archives.write_tree(tree, archive, kind="box", name="alpha", passphrase=PASS)
    (tree / "marked").unlink()
    return archive


def test_a_wrong_passphrase_is_named_as_such(tmp_path: Path):
    archive = _ours(tmp_path)
    with pytest.raises(archives.WrongPassphrase) as raised:
        archives.extract(archive, tmp_path / "out", archives.Passphrase("not it"))
    assert str(raised.value).startswith("wrong passphrase")
    assert "not it" not in str(raised.value)
    _assert_nothing_left(tmp_path, tmp_path / "out")


@pytest.mark.parametrize("keep", [0.02, 0.5, 0.97])
def test_a_truncated_archive_is_named_as_such(tmp_path: Path, keep: float):
    archive = _ours(tmp_path)
    raw = archive.read_bytes()
    archive.write_bytes(raw[: int(len(raw) * keep)])
    with pytest.raises(archives.CorruptArchive, match="truncated"):
        archives.extract(archive, tmp_path / "out", PASS)
    _assert_nothing_left(tmp_path, tmp_path / "out")


def test_an_altered_archive_fails_its_integrity_check(tmp_path: Path):
    archive = _ours(tmp_path)
    raw = bytearray(archive.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    archive.write_bytes(bytes(raw))
    with pytest.raises(archives.CorruptArchive, match="damaged"):
        archives.extract(archive, tmp_path / "out", PASS)
    _assert_nothing_left(tmp_path, tmp_path / "out")


def test_a_file_that_is_not_openpgp_is_named_as_such(tmp_path: Path):
    archive = tmp_path / "x.gpg"
    archive.write_bytes(b"hello, this is not an archive\n" * 10)
    with pytest.raises(archives.CorruptArchive, match="not an encrypted archive"):
        archives.verify(archive, PASS)


def test_a_missing_archive_says_so(tmp_path: Path):
    with pytest.raises(archives.SourceError, match="cannot open"):
        archives.verify(tmp_path / "nope.gpg", PASS)


def _stream(*members) -> io.BytesIO:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w|gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    raw.seek(0)
    return raw


@pytest.mark.parametrize(
    ("members", "error"),
    [
        ([data_file("../escape", b"x")], archives.ParentReference),
        ([data_file("/abs", b"x")], archives.AbsolutePath),
        ([(typed("ln", tarfile.SYMTYPE, "/usr/bin/python3"), None)], archives.EscapingLink),
        ([(typed("dev", tarfile.BLKTYPE), None)], archives.SpecialFile),
    ],
    ids=["parent", "absolute", "symlink", "device"],
)
def test_an_unsafe_stream_is_refused_when_saving_and_no_archive_is_left(tmp_path: Path, members, error):
    out = tmp_path / "w.gpg"
    with pytest.raises(error):
        archives.write_stream(_stream(*members), out, kind="workspace", name="w", passphrase=PASS)
    assert list(tmp_path.iterdir()) == [tmp_path / "tmpdir"]


@pytest.mark.parametrize("kind", ["fifo", "absolute-link"])
def test_an_unsafe_tree_is_refused_when_saving(tmp_path: Path, kind: str):
    tree = sample_tree(tmp_path / "tree")
    if kind == "fifo":
        os.mkfifo(tree / "pipe")
        error: type[archives.ArchiveError] = archives.SpecialFile
    else:
        (tree / "py").symlink_to("/usr/bin/python3")
        error = archives.EscapingLink
    with pytest.raises(error) as raised:
        archives.write_tree(tree, tmp_path / "a.gpg", kind="box", name="a", passphrase=PASS)
    assert raised.value.member in ("data/pipe", "data/py")
    assert not (tmp_path / "a.gpg").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_a_socket_in_the_tree_is_skipped(tmp_path: Path):
    import socket

    tree = sample_tree(tmp_path / "tree")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tree / "s.sock"))
        archives.write_tree(tree, tmp_path / "a.gpg", kind="box", name="a", passphrase=PASS)
    finally:
        sock.close()
    listed: list[str] = []
    archives.verify(tmp_path / "a.gpg", PASS, on_member=lambda rel, _m: listed.append(rel))
    assert "s.sock" not in listed and "home/workspace/f" in listed


def test_a_file_that_shrinks_while_saved_fails_the_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "log").write_bytes(b"x" * 100_000)
    from archives import tarball

    real: Callable = tarball.walk_tree

    def shrinking(root: Path):
        for entry in real(root):
            if entry.path is not None:
                entry.path.write_bytes(b"short")
            yield entry

    monkeypatch.setattr("archives.encrypted.walk_tree", shrinking)
    with pytest.raises(archives.SourceError, match="shrank while it was being archived"):
        archives.write_tree(tree, tmp_path / "a.gpg", kind="box", name="a", passphrase=PASS)
    assert not (tmp_path / "a.gpg").exists()
