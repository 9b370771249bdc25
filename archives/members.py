"""What a tar member may be: the one set of rules for writing, validating and extracting.

An archive holds ``manifest.json`` first, then the payload under ``data/``.  A member is
accepted when its name, once a leading ``./`` is dropped, is relative, has no ``..`` component
and lies under ``data/``; when it is a directory, a regular file, a symbolic link with a relative
target, or a hard link to a regular file that appeared before it; when no earlier member makes
its path go through a link or a file; when it does not repeat an earlier non-directory; and
while the payload stays within ``Limits``.  Devices and FIFOs are refused.

Symbolic links are judged against the tree as it stands on disk once every member is in place
(``Checker.finish``, ``escaping_links``): a link's target is walked from the link's directory the
way the kernel walks it, so a component that is itself one of the archive's links is replaced by
that link's target and a ``..`` after it climbs from where the link leads.  A link whose walk
leaves ``data/``, or takes more links than the kernel follows in one lookup, is refused, however
innocent its own text looks.  A member's own path never goes through a link (above), so nothing
is ever written through one.  The same rules apply when a tree or a stream is archived, so an
archive this code writes is one it will read back.
"""

from __future__ import annotations

import tarfile
from collections import deque
from collections.abc import Mapping
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
MAX_LINK_HOPS = 40  # links the kernel follows in one path lookup before it gives up (ELOOP)


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


@dataclass(frozen=True)
class LinkEscape:
    """A symbolic link at ``rel`` (to ``target``) whose walk leaves the tree: ``via`` are the other links
    it went through, in order; ``too_deep`` when it took more than MAX_LINK_HOPS links."""

    rel: str
    target: str
    via: tuple[str, ...]
    too_deep: bool = False


def walk_link(links: Mapping[str, str], rel: str) -> LinkEscape | None:
    """Walk the link at ``rel`` through ``links`` (every symbolic link of the tree: relative path ->
    target) as the kernel would; None when it ends inside the tree, else how it leaves."""
    target = links[rel]
    if not target or target.startswith("/"):
        return LinkEscape(rel, target, ())
    parts = rel.split("/")[:-1]
    pending = deque(target.split("/"))
    via: list[str] = []
    while pending:
        part = pending.popleft()
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                return LinkEscape(rel, target, tuple(via))
            parts.pop()
            continue
        parts.append(part)
        here = "/".join(parts)
        followed = links.get(here)
        if followed is None:
            continue
        if len(via) >= MAX_LINK_HOPS:
            return LinkEscape(rel, target, tuple(via), too_deep=True)
        via.append(here)
        if not followed or followed.startswith("/"):
            return LinkEscape(rel, target, tuple(via))
        parts.pop()  # the link's own name gives way to its target, walked from the link's directory
        pending.extendleft(reversed(followed.split("/")))
    return None


def escaping_links(links: Mapping[str, str]) -> list[LinkEscape]:
    """Every link of ``links`` (a whole tree's: relative path -> target) whose walk leaves the tree."""
    found = (walk_link(links, rel) for rel in links)
    return [escape for escape in found if escape is not None]


def describe_escapes(escapes: list[LinkEscape], prefix: str = "", limit: int = 3) -> str:
    """``PATH -> TARGET (through LINK, ...)`` for the first few escaping links, and how many more."""

    def one(e: LinkEscape) -> str:
        how = f"more than {MAX_LINK_HOPS} links deep" if e.too_deep else ""
        if e.via and not e.too_deep:
            how = "through " + ", ".join(prefix + v for v in e.via)
        return f"{prefix}{e.rel} -> {e.target}" + (f" ({how})" if how else "")

    shown = "; ".join(one(e) for e in escapes[:limit])
    return shown + (f" and {len(escapes) - limit} more" if len(escapes) > limit else "")


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
    # hash(relative path) -> "dir" | "file" | "link" | "parent" (a directory only implied by members
    # inside it): what earlier members were, without keeping their
    # names (a 64-bit hash per member; a collision could only refuse a good archive, never admit a bad one:
    # every decision that keeps extraction inside the destination is made from the member's own name).
    _kinds: dict[int, str] = field(default_factory=dict)
    # The symbolic links so far (payload-relative path -> target): ``finish`` walks them all.
    _links: dict[str, str] = field(default_factory=dict)

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
            self._check_symlink(info.linkname, shown)
            self._links[rel] = info.linkname
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
        if previous == "parent" and kind != "dir":
            raise UnexpectedMember(
                shown,
                f"the archive member {shown!r} comes after members inside it",
                "extraction made it a directory for them, which a link or a file cannot replace",
                "archive each directory before what it holds",
            )
        if previous is not None and previous != "parent" and not (previous == "dir" and kind == "dir"):
            raise UnexpectedMember(
                shown,
                f"the archive member {shown!r} appears twice",
                "a second copy would replace the first during extraction",
                "archive each path once",
            )
        self._kinds[hash(rel)] = kind
        return rel

    def finish(self) -> None:
        """After the last member: refuse the archive if any symbolic link, walked through the others as
        they stand on disk, leaves the tree (each such link is named, with the links it went through)."""
        escapes = escaping_links(self._links)
        if not escapes:
            return
        first = escapes[0]
        many = len(escapes) > 1
        raise EscapingLink(
            f"{PAYLOAD}/{first.rel}",
            f"the symbolic link{'s' if many else ''} {describe_escapes(escapes, PAYLOAD + '/')} "
            f"point{'' if many else 's'} outside the archived tree",
            "followed through the tree's other links as the system follows them, a restored link must stay "
            "inside the archived tree",
            "make the links point inside the tree, or remove them before archiving",
        )

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
            if kind is None:  # made a directory by extraction: a later link or file there is refused
                self._kinds[hash(parent)] = "parent"
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

    def _check_symlink(self, target: str, shown: str) -> None:
        """An absolute (or empty) target is refused at once; where a relative one leads is decided by
        ``finish``, once every link it may go through is known."""
        if not target or target.startswith("/"):
            raise EscapingLink(
                shown,
                f"the symbolic link {shown!r} points to the absolute path {target!r}",
                "a restored link must stay inside the archived tree; an absolute target could reach the host",
                "make the link relative to a path inside the tree, or remove it before archiving",
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
