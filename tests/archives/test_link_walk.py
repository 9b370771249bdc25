"""Links are judged against the tree as it stands on disk: generated trees against the system's own walk.

Each example is a random tree of directories, files and relative or absolute links, whose link
targets chain through one another and climb with ``..``.  The tree is first made on disk as it
is, except that each file is a directory and every missing directory a link's walk could pass
through is made empty: the rules take a path component that is missing, or a file, as a directory
that may yet appear there.  Then ``os.path.realpath``
and ``os.stat`` say, per link, where the system takes it: outside the tree, or into a loop.  The
member rules (``Checker``, in a random member order) must refuse exactly the trees holding such a
link, naming each one, and every tree they accept must come out of ``Extractor`` with every link
resolving inside the destination.
"""

from __future__ import annotations

import errno
import itertools
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archives.errors import EscapingLink
from archives.members import PAYLOAD, Checker
from archives.tarball import Extractor

NAMES = ("a", "b")
STEPS = (*NAMES, "..", ".")
EXAMPLES = 2000  # nox -s tests_full; nox -s tests runs QUICK_EXAMPLES of the same property
QUICK_EXAMPLES = 200
COMPLETE_DEPTH = 4  # entries sit at most 3 deep; a walk deeper than this meets no link of the tree

_counter = itertools.count()


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """(path -> (kind, link target)) with every ancestor of a path a directory, and a member order."""
    entries: dict[str, tuple[str, str]] = {}
    for _ in range(draw(st.integers(1, 9))):
        path = "/".join(draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3)))
        kind = draw(st.sampled_from(("dir", "file", "link", "link", "link")))
        target = ""
        if kind == "link":
            steps = draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=6))
            target = ("/" if draw(st.integers(0, 15)) == 0 else "") + "/".join(steps)
        entries.setdefault(path, (kind, target))

    def under_directories(path: str) -> bool:
        parts = path.split("/")
        return all(entries.get("/".join(parts[:i]), ("dir", ""))[0] == "dir" for i in range(1, len(parts)))

    kept = {path: entry for path, entry in entries.items() if under_directories(path)}
    return kept, draw(st.permutations(sorted(kept)))


def _make(root: Path, entries: dict[str, tuple[str, str]], *, complete: bool = False) -> None:
    """The tree on disk as generated (parents first), no rule applied; ``complete``: files made as
    directories, and every other path of up to COMPLETE_DEPTH names that no link blocks made one too."""
    if complete:
        for depth in range(1, COMPLETE_DEPTH + 1):
            for names in itertools.product(NAMES, repeat=depth):
                path = "/".join(names)
                ancestors = ["/".join(names[:i]) for i in range(1, depth + 1)]
                if all(entries.get(a, ("dir", ""))[0] != "link" for a in ancestors):
                    (root / path).mkdir(parents=True, exist_ok=True)
    for path in sorted(entries, key=lambda p: p.count("/")):
        kind, target = entries[path]
        full = root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        if kind == "dir" or (kind == "file" and complete):
            full.mkdir(exist_ok=True)
        elif kind == "file":
            full.write_bytes(b"x")
        else:
            os.symlink(target, full)


def _leaves(root: Path, path: str) -> bool:
    """Whether the system, following the link at ``path``, ends outside ``root`` or in a loop."""
    try:
        os.stat(root / path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return True
    resolved = os.path.realpath(root / path)
    return not (resolved == str(root) or resolved.startswith(str(root) + os.sep))


def _member(path: str, kind: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(f"{PAYLOAD}/{path}")
    info.mode = 0o755 if kind == "dir" else 0o644
    if kind == "dir":
        info.type = tarfile.DIRTYPE
    elif kind == "link":
        info.type, info.linkname = tarfile.SYMTYPE, target
    else:
        info.size = 1
    return info


@pytest.fixture(scope="module")
def scratch():
    root = Path(tempfile.mkdtemp(prefix="kit-links-"))
    yield root
    shutil.rmtree(root)


_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture]}


@settings(max_examples=QUICK_EXAMPLES, **_SETTINGS)
@given(tree=trees())
def test_the_rules_refuse_exactly_the_links_the_system_takes_out_of_the_tree(scratch: Path, tree):
    _judge(scratch, tree)


@pytest.mark.full
@settings(max_examples=EXAMPLES, **_SETTINGS)
@given(tree=trees())
def test_the_rules_refuse_exactly_the_links_the_system_takes_out_of_the_tree_2000_trees(scratch: Path, tree):
    _judge(scratch, tree)


def _judge(scratch: Path, tree: tuple[dict[str, tuple[str, str]], list[str]]) -> None:
    entries, order = tree
    case = scratch / str(next(_counter))
    truth, made = case / "truth" / "root", case / "made" / "root"
    truth.mkdir(parents=True)
    made.mkdir(parents=True)
    try:
        _make(truth, entries, complete=True)
        leaving = {path for path, (kind, _) in entries.items() if kind == "link" and _leaves(truth, path)}
        absolute = {path for path, (kind, target) in entries.items() if kind == "link" and target.startswith("/")}

        checker, extractor = Checker(), Extractor(made)
        try:
            for path in order:
                kind, target = entries[path]
                info = _member(path, kind, target)
                rel = checker.check(info)
                extractor.add(rel, info, _One() if kind == "file" else None)
            checker.finish()
            extractor.finish()
        except EscapingLink as refused:
            assert leaving, f"refused a tree whose every link stays inside: {entries} ({refused})"
            if refused.member[len(PAYLOAD) + 1 :] in absolute:
                return  # refused on sight, before the rest of the tree is known
            assert not absolute, f"an absolute link was let through: {entries}"
            for path in leaving:
                assert f"{PAYLOAD}/{path} -> " in str(refused) or len(leaving) > 3, (path, str(refused))
            assert refused.member[len(PAYLOAD) + 1 :] in leaving
            return
        assert not leaving, f"accepted {sorted(leaving)}, which the system takes out of the tree: {entries}"
        for path, (kind, _) in entries.items():
            if kind == "link":
                assert not _leaves(made, path), f"the extracted {path} leads out of the destination"
    finally:
        shutil.rmtree(case)


class _One:
    """A file's data: one byte."""

    def __init__(self) -> None:
        self.left = b"x"

    def read(self, size: int = -1) -> bytes:
        out, self.left = self.left, b""
        return out
