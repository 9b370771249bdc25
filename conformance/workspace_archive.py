"""The workspace command's only contact with the archive format (archives/): write, read, passphrase.

Every ``archives.ArchiveError`` that reaches the kit becomes an ``ArchiveRefused`` (a KitError
with the archive's own what, why and fix), so the command line prints it as one ``error:`` line.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import archives
import archives.members
from archives.tarball import forget_members
from conformance import redact
from conformance import workspace_tree as wt
from conformance.errors import InputFileError, KitError

KIND = "workspace"


class ArchiveRefused(KitError, ValueError):
    """An archive could not be written or read: wrong passphrase, damaged, unsafe, too large, ..."""

    fix = "use an intact archive from `hermes-backend-kit workspace save` with its passphrase"


@contextlib.contextmanager
def refusals() -> Iterator[None]:
    """Turn the archive package's refusals into the kit's error (what, why and fix kept)."""
    try:
        yield
    except archives.ArchiveError as exc:
        raise ArchiveRefused(exc.what, exc.fix, exc.why) from None


def obtain_passphrase(*, confirm: bool) -> archives.Passphrase:
    """BOX_PASSPHRASE, else a prompt on the terminal without echo (twice for a new archive)."""
    with refusals():
        passphrase = archives.Passphrase.obtain(confirm=confirm)
    redact.register(passphrase.reveal().decode("utf-8"))  # masked in every output the kit writes
    return passphrase


@contextlib.contextmanager
def withheld_from_children() -> Iterator[None]:
    """Take BOX_PASSPHRASE out of this process's environment while the command runs, so no process
    it starts (the fake's server, a local backend's commands) inherits the passphrase; put it back after."""
    value = os.environ.pop(archives.ENV_VAR, None)
    try:
        yield
    finally:
        if value is not None:
            os.environ[archives.ENV_VAR] = value


def check_new_output(out: Path) -> None:
    """Refuse an --out that exists or whose directory does not, before any sandbox is touched."""
    if os.path.lexists(out):
        raise ArchiveRefused(
            f"{out} already exists", "choose another --out or move the file away: an archive is never overwritten"
        )
    if not out.parent.is_dir():
        raise ArchiveRefused(f"cannot write {out}: the directory {out.parent} does not exist", "create it first")


def check_input(archive: Path) -> None:
    """Refuse a missing archive, or one that is not a readable file, before any sandbox is touched."""
    if not archive.exists():
        raise InputFileError(f"{archive}: no such archive", "give the path of a file written by `workspace save`")
    if not archive.is_file():
        raise InputFileError(f"{archive} is not a file", "give the path of a file written by `workspace save`")
    if not os.access(archive, os.R_OK):
        raise InputFileError(f"{archive} cannot be read", "check its permissions")


def write_workspace(out: Path, stream: IO[bytes], *, name: str, passphrase: archives.Passphrase) -> int:
    """Archive a tar stream (members relative to the workspace root) into the new file ``out``;
    the payload's bytes of file data."""
    with refusals():
        info = archives.write_stream(stream, out, kind=KIND, name=name, passphrase=passphrase)
    return info.payload_bytes


@contextlib.contextmanager
def validated_members(
    archive: Path, passphrase: archives.Passphrase, progress: Callable[[int, int | None], None] | None = None
) -> Iterator[tuple[int, Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]]]:
    """Validate all of ``archive`` (decrypting it through), then give its bytes of file data and its
    members one by one: (header named relative to the workspace root, data of a regular file).

    The validation pass ends before this yields: a wrong passphrase, a damaged or an unsafe
    archive raises ArchiveRefused here, with nothing read by the caller yet.
    """

    def report(stage: str, done: int, total: int | None) -> None:
        if progress is not None and stage == "validate":
            progress(done, total)

    with refusals(), archives.open_payload(archive, passphrase, kind=KIND, progress=report, level=1) as payload:

        def members() -> Iterator[tuple[tarfile.TarInfo, IO[bytes] | None]]:
            with refusals(), tarfile.open(fileobj=payload, mode="r|gz") as tar:  # type: ignore[call-overload]
                for member in tar:
                    forget_members(tar)
                    yield member, tar.extractfile(member) if member.isreg() else None

        yield payload.info.payload_bytes, members()


def read_tree(archive: Path, passphrase: archives.Passphrase) -> wt.Tree:
    """The tree an archive holds (decrypted and validated; file contents hashed as they stream)."""
    builder = wt.TreeBuilder()
    with validated_members(archive, passphrase) as (_total, items):
        for info, data in items:
            add_to_tree(builder, info, data)
    return builder.tree


def check_tree(tree: wt.Tree) -> None:
    """Hold a sandbox's tree to the archive's member rules (links that leave the tree or are absolute,
    the size and count limits) before anything is fetched: what the archive would refuse, refused now."""
    checker = archives.members.Checker()
    root = tarfile.TarInfo(archives.members.PAYLOAD)
    root.type = tarfile.DIRTYPE
    with refusals():
        checker.check(root)
        for path in sorted(tree.entries, key=lambda p: p.split("/")):  # parents before their children
            entry = tree.entries[path]
            info = tarfile.TarInfo(f"{archives.members.PAYLOAD}/{path}")
            info.mode = entry.mode
            if entry.kind == wt.DIR:
                info.type = tarfile.DIRTYPE
            elif entry.kind == wt.LINK:
                info.type, info.linkname = tarfile.SYMTYPE, entry.content
            else:
                info.size = entry.size
            checker.check(info)
        checker.finish()


def add_to_tree(builder: wt.TreeBuilder, info: tarfile.TarInfo, data: Any) -> None:
    rel = wt.relative_name(info.name)
    if not rel:
        return
    if info.isdir():
        builder.directory(rel, info.mode)
    elif info.issym():
        builder.symlink(rel, info.linkname)
    elif info.islnk():
        builder.hardlink(rel, wt.relative_name(info.linkname))
    else:
        builder.file(rel, info.mode, iter(lambda: data.read(1024 * 1024), b""))
