"""A workspace tree as the kit compares it: (path, type, mode, content, link target) per entry.

The same ``Tree`` is built two ways, so a transfer can be checked end to end:

- inside a sandbox, through ``execute`` only: ``listing_script`` writes GNU find's metadata and
  ``sha256sum -z`` of every regular file to a file in the sandbox, which the caller reads back
  and ``parse_listing`` turns into a tree (nothing is hashed on this machine but the records);
- from the members of a tar (``TreeBuilder``), hashing each file's bytes as they stream past.

``digest`` is one SHA-256 over the entries sorted by path, so two trees are equal exactly when
their digests are; ``differences`` names the first paths that differ.  Paths are kept as text
decoded with ``surrogateescape``, the way ``tarfile`` and ``os.fsdecode`` keep them, so a name
that is not UTF-8 compares equal on both sides.

What is compared: every entry below the workspace root (not the root itself), except Hermes's
own top-level entries (``HOST_MANAGED``); a regular file's mode and SHA-256, a directory's mode,
a symbolic link's target (never followed; a link's mode means nothing on Linux).  Owners,
timestamps, extended attributes and hard-link identity are not compared (a hard link is saved as
a copy of its file).  Sockets, FIFOs and devices are not part of a tree: a listing counts them
in ``Tree.skipped`` so the caller can say they were left out.
"""

from __future__ import annotations

import hashlib
import posixpath
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

# Entries at the top of a workspace that the Hermes host or a backend writes and owns (synced
# skills, credentials and caches under .hermes, a backend's transfer and temp directories): they
# are not the user's state, hold credentials, and are made again by every new session.
HOST_MANAGED_PATTERNS = (".hermes", ".hermes-*", ".hermes_*")

FILE, DIR, LINK = "file", "dir", "link"
_FIND_TYPES = {"f": FILE, "d": DIR, "l": LINK}
SUMS_MARK = b"SUMS"


def is_host_managed(path: str) -> bool:
    """Whether a workspace-relative path lies under one of Hermes's own top-level entries."""
    top = path.split("/", 1)[0]
    return top == ".hermes" or top.startswith((".hermes-", ".hermes_"))


def _fsbytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _fstext(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class Entry:
    path: str  # relative to the workspace root, '/'-separated, no leading './', no trailing '/'
    kind: str  # FILE | DIR | LINK
    mode: int  # permission bits (07777); 0 for a link
    content: str = ""  # a file's SHA-256 (hex), a link's target, "" for a directory
    size: int = field(default=0, compare=False)  # a file's bytes (for figures; the SHA-256 decides equality)

    def record(self) -> bytes:
        return b"\0".join((_fsbytes(self.path), self.kind.encode(), f"{self.mode:o}".encode(), _fsbytes(self.content)))

    def describe(self) -> str:
        what = {FILE: f"file {self.mode:04o} sha256 {self.content[:12]}", DIR: f"dir {self.mode:04o}"}
        return what.get(self.kind, f"link -> {self.content}")


@dataclass
class Tree:
    entries: dict[str, Entry] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # sockets, FIFOs, devices (listings only)

    def add(self, entry: Entry) -> None:
        self.entries[entry.path] = entry

    @property
    def file_bytes(self) -> int:
        return sum(e.size for e in self.entries.values() if e.kind == FILE)

    def digest(self) -> str:
        """SHA-256 over every entry's record, in byte order of the paths."""
        h = hashlib.sha256()
        for path in sorted(self.entries, key=_fsbytes):
            h.update(self.entries[path].record())
            h.update(b"\0\0")
        return h.hexdigest()

    def summary(self) -> str:
        kinds = [e.kind for e in self.entries.values()]
        return (
            f"{kinds.count(FILE)} file(s), {kinds.count(DIR)} dir(s), {kinds.count(LINK)} link(s); "
            f"tree sha256 {self.digest()[:16]}"
        )


def differences(expected: Tree, actual: Tree, limit: int = 5) -> list[str]:
    """The first ``limit`` differences between two trees, each in a few words."""
    found: list[str] = []
    for path in sorted(set(expected.entries) | set(actual.entries), key=_fsbytes):
        want, got = expected.entries.get(path), actual.entries.get(path)
        if want == got:
            continue
        if got is None:
            assert want is not None
            found.append(f"{path!r} is missing (expected {want.describe()})")
        elif want is None:
            found.append(f"{path!r} is extra ({got.describe()})")
        else:
            found.append(f"{path!r} is {got.describe()}, expected {want.describe()}")
        if len(found) >= limit:
            break
    return found


# -- in the sandbox ---------------------------------------------------------------------------
def prune_expression(extra: Iterable[str] = ()) -> str:
    """find's ``\\( ... \\) -prune`` for Hermes's own top-level entries and ``extra`` './'-paths."""
    tests = [f"-path {shlex.quote('./' + p)}" for p in HOST_MANAGED_PATTERNS]
    tests += [f"-path {shlex.quote(p)}" for p in extra]
    return "\\( " + " -o ".join(tests) + " \\) -prune"


def listing_script(out: str, prune: str) -> str:
    """Shell run in the workspace root: write the listing ``parse_listing`` reads to ``out``.

    Pairs of NUL-terminated fields ``TYPE MODE SIZE PATH`` and ``LINK-TARGET`` (empty unless a link)
    for every entry, then ``SUMS``, then ``sha256sum -z`` lines ``HEX  ./PATH`` for every regular
    file.  Needs GNU find (-printf) and coreutils sha256sum (-z: names unescaped).
    """
    q = shlex.quote(out)
    return (
        "{ "
        f"find . -mindepth 1 {prune} -o -printf '%y %m %s %P\\0%l\\0' && printf 'SUMS\\0' && "
        f"find . -mindepth 1 {prune} -o -type f -print0 | xargs -0r sha256sum -z -- ; "
        f"}} > {q}"
    )


def parse_listing(raw: bytes) -> Tree:
    """The tree a ``listing_script`` output describes; ValueError if it is not one."""
    fields = raw.split(b"\0")
    tree = Tree()
    kinds: dict[str, tuple[str, int, str, int]] = {}
    i = 0
    while True:
        if i >= len(fields):
            raise ValueError("the listing ends before its SUMS mark")
        head = fields[i]
        if head == SUMS_MARK:
            i += 1
            break
        if i + 1 >= len(fields):
            raise ValueError("the listing ends inside an entry")
        kind_char, mode_text, size_text, path = head.split(b" ", 3)
        rel = _fstext(path)
        kind = _FIND_TYPES.get(kind_char.decode("ascii", "replace"))
        if kind is None:
            tree.skipped.append(rel)
        else:
            kinds[rel] = (kind, int(mode_text, 8) if kind != LINK else 0, _fstext(fields[i + 1]), int(size_text))
        i += 2
    sums: dict[str, str] = {}
    for line in fields[i:]:
        if not line:
            continue
        digest, _, name = line.partition(b"  ")
        if not name.startswith(b"./") or len(digest) != 64:
            raise ValueError(f"not a sha256sum line: {line[:80]!r}")
        sums[_fstext(name[2:])] = digest.decode("ascii")
    for rel, (kind, mode, target, size) in kinds.items():
        if kind == FILE:
            if rel not in sums:
                raise ValueError(f"the listing has no checksum for {rel!r} (unreadable?)")
            tree.add(Entry(rel, FILE, mode, sums[rel], size))
        elif kind == DIR:
            tree.add(Entry(rel, DIR, mode))
        else:
            tree.add(Entry(rel, LINK, 0, target))
    return tree


# -- from a tar ----------------------------------------------------------------------------------
def relative_name(name: str, prefix: str = "") -> str:
    """A member name relative to the tree's root: './', ``prefix`` and trailing '/' removed."""
    rel = posixpath.normpath("/" + name).lstrip("/")
    if prefix:
        rel = rel[len(prefix) :].lstrip("/") if rel == prefix or rel.startswith(prefix + "/") else rel
    return "" if rel == "." else rel


class TreeBuilder:
    """Builds a Tree from tar members in order (files hashed from their streamed bytes)."""

    def __init__(self) -> None:
        self.tree = Tree()

    def directory(self, rel: str, mode: int) -> None:
        if rel:
            self.tree.add(Entry(rel, DIR, mode & 0o7777))

    def symlink(self, rel: str, target: str) -> None:
        self.tree.add(Entry(rel, LINK, 0, target))

    def file(self, rel: str, mode: int, chunks: Iterable[bytes]) -> None:
        h = hashlib.sha256()
        size = 0
        for chunk in chunks:
            h.update(chunk)
            size += len(chunk)
        self.tree.add(Entry(rel, FILE, mode & 0o7777, h.hexdigest(), size))

    def hardlink(self, rel: str, target_rel: str) -> None:
        """A hard link restores as another name for an earlier file: its content and its mode."""
        first = self.tree.entries[target_rel]
        self.tree.add(Entry(rel, FILE, first.mode, first.content, first.size))
