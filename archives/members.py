"""What a tar member may be: the one set of rules for writing, validating and extracting.

An archive holds ``manifest.json`` first, then the payload under ``data/``.  A member is
accepted when its name, once a leading ``./`` is dropped, is relative, has no ``..`` component
and lies under ``data/``; when it is a directory, a regular file, a symbolic link whose target,
resolved from the link's own directory, stays under ``data/``, or a hard link to a regular file
that appeared before it; when no earlier member makes its path go through a link or a file;
when it does not repeat an earlier non-directory; and while the payload stays within ``Limits``.
Devices and FIFOs are refused.  The same rules apply when a tree or a stream is archived, so an
archive this code writes is one it will read back.
"""

from __future__ import annotations

import posixpath
import tarfile
from dataclasses import dataclass, field

from archives.errors import (
    AbsolutePath,
    CorruptArchive,
    EscapingLink,
    ParentReference,
    SpecialFile,
    TooLarge,
    UnexpectedMember,
)

PAYLOAD = "data"
GiB = 1024**3
DEFAULT_MAX_BYTES = 32 * GiB
DEFAULT_MAX_MEMBERS = 2_000_000


@dataclass(frozen=True)
class Limits:
    """The stated limits of a payload: total bytes of file data and number of members."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_members: int = DEFAULT_MAX_MEMBERS


DEFAULT_LIMITS = Limits()


def describe_bytes(count: int) -> str:
    for unit, size in (("GiB", GiB), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} bytes"


def link_escape(rel: str, target: str) -> str | None:
    """How a symbolic link at ``rel`` (relative to the tree's root) to ``target`` would leave the tree:
    "absolute" (an empty target counts), "outside" (resolved from the link's directory, it climbs out
    of the root), or None when it stays inside.  The rule for writing, reading and for a caller that
    checks a tree before archiving it."""
    if not target or target.startswith("/"):
        return "absolute"
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
    return "outside" if resolved == ".." or resolved.startswith("../") else None


def normalize(name: str) -> str:
    """A member name without leading ``./``, empty or ``.`` components and trailing ``/``."""
    absolute = name.startswith("/")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return ("/" if absolute else "") + "/".join(parts)


@dataclass
class Checker:
    """Validates members in archive order; ``check`` gives a member's path relative to ``data/``."""

    limits: Limits = DEFAULT_LIMITS
    members: int = 0
    payload_bytes: int = 0
    # hash(relative path) -> "dir" | "file" | "link": what earlier members were, without keeping their
    # names (a 64-bit hash per member; a collision could only refuse a good archive, never admit a bad one:
    # every decision that keeps extraction inside the destination is made from the member's own name).
    _kinds: dict[int, str] = field(default_factory=dict)

    def check(self, info: tarfile.TarInfo) -> str:
        """The member's payload-relative path ("" for ``data/`` itself), or the error refusing it."""
        shown = info.name
        name = normalize(info.name)
        if name.startswith("/"):
            raise AbsolutePath(
                shown,
                f"the archive member {shown!r} has an absolute path",
                "extracting it would write outside the destination",
                "archive the tree with relative paths (tar -C DIR ...)",
            )
        parts = name.split("/") if name else []
        if ".." in parts:
            raise ParentReference(
                shown,
                f"the archive member {shown!r} has a '..' component",
                "extracting it would write outside the destination",
                "archive the tree with paths that stay inside it",
            )
        if not parts or parts[0] != PAYLOAD:
            raise UnexpectedMember(
                shown,
                f"the archive member {shown!r} is outside data/",
                "after manifest.json an archive holds only its payload under data/",
                "put the tree under data/ (tar -czf X manifest.json data)",
            )
        rel = "/".join(parts[1:])
        self._count(info, shown)
        self._check_parents(rel, shown)
        if info.isdir():
            kind = "dir"
        elif info.isreg():
            kind = "file"
        elif info.issym():
            self._check_symlink(rel, info.linkname, shown)
            kind = "link"
        elif info.islnk():
            self._check_hardlink(info.linkname, shown)
            kind = "file"
        elif info.ischr() or info.isblk() or info.isfifo():
            what = "a device file" if info.isdev() and not info.isfifo() else "a FIFO"
            raise SpecialFile(
                shown,
                f"the archive member {shown!r} is {what}",
                "archives restore files, directories and links only; a device or FIFO could reach the host",
                "remove it from the tree before archiving",
            )
        else:
            raise UnexpectedMember(
                shown,
                f"the archive member {shown!r} has an unsupported type {info.type!r}",
                "archives hold files, directories and links only",
                "remove it from the tree before archiving",
            )
        previous = self._kinds.get(hash(rel))
        if previous is not None and not (previous == "dir" and kind == "dir"):
            raise UnexpectedMember(
                shown,
                f"the archive member {shown!r} appears twice",
                "a second copy would replace the first during extraction",
                "archive each path once",
            )
        self._kinds[hash(rel)] = kind
        return rel

    def _count(self, info: tarfile.TarInfo, shown: str) -> None:
        self.members += 1
        if info.isreg():
            self.payload_bytes += info.size
        if self.payload_bytes > self.limits.max_bytes:
            raise TooLarge(
                "the archive is too large",
                f"its files hold more than the limit of {describe_bytes(self.limits.max_bytes)} (reached at {shown!r})",
                "remove large files from the tree, or raise the limit if the archive is trusted",
            )
        if self.members > self.limits.max_members:
            raise TooLarge(
                "the archive has too many members",
                f"more than the limit of {self.limits.max_members} (reached at {shown!r})",
                "archive fewer files, or raise the limit if the archive is trusted",
            )

    def _check_parents(self, rel: str, shown: str) -> None:
        parts = rel.split("/") if rel else []
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            kind = self._kinds.get(hash(parent))
            if kind == "link":
                raise UnexpectedMember(
                    shown,
                    f"the archive member {shown!r} goes through the link data/{parent}",
                    "extracting it would write wherever that link points",
                    "archive the tree without paths through links",
                )
            if kind == "file":
                raise CorruptArchive(
                    f"the archive member {shown!r} is inside the file data/{parent}",
                    "a file cannot hold other members",
                    "use an intact archive",
                )

    def _check_symlink(self, rel: str, target: str, shown: str) -> None:
        escape = link_escape(rel, target)
        if escape == "absolute":
            raise EscapingLink(
                shown,
                f"the symbolic link {shown!r} points to the absolute path {target!r}",
                "a restored link must stay inside the archived tree; an absolute target could reach the host",
                "make the link relative to a path inside the tree, or remove it before archiving",
            )
        if escape == "outside":
            raise EscapingLink(
                shown,
                f"the symbolic link {shown!r} points outside the archived tree ({target!r})",
                "a restored link must stay inside the archived tree",
                "make the link point inside the tree, or remove it before archiving",
            )

    def _check_hardlink(self, target: str, shown: str) -> None:
        name = normalize(target)
        parts = name.split("/") if name else []
        if name.startswith("/") or ".." in parts or not parts or parts[0] != PAYLOAD:
            raise EscapingLink(
                shown,
                f"the hard link {shown!r} points outside the archived tree ({target!r})",
                "a hard link may only name an earlier file of the archive",
                "archive the tree without links to files outside it",
            )
        if self._kinds.get(hash("/".join(parts[1:]))) != "file":
            raise EscapingLink(
                shown,
                f"the hard link {shown!r} names {target!r}, which is not an earlier file of the archive",
                "a hard link may only name an earlier regular file of the archive",
                "archive the tree with its linked files",
            )
