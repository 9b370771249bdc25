"""What Hermes's command wrapper leaves in an unisolated box's /tmp, which is this machine's.

Hermes keeps a session's snapshot and cwd file at fixed paths under the
sandbox's ``/tmp`` (``hermes-snap-<session>.sh``, its ``.tmp.<pid>`` partials,
``hermes-cwd-<session>.txt``).  An isolated box has a /tmp of its own; an
unisolated one (no namespaces here, or ``KIT_WORLD_NAMESPACES=off``) writes
them into the machine's, where they would outlive the run.  The world removes
a session's files with its box: those whose snapshot exports the box's HOME,
a path under the world's own directory, so no other program's files are
touched.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

HOST_TMP = Path("/tmp")  # Hermes's get_temp_dir() of a sandbox: the literal path, not $TMPDIR
_SNAPSHOT = re.compile(r"^hermes-snap-(?P<session>[0-9a-f]+)\.sh(?:\.tmp\.\d+)?$")
_HEAD = 16 * 1024  # the snapshot's exports come first, HOME among them


def _exported_home(path: Path) -> str | None:
    """The HOME a snapshot file exports, reading it without following a link or blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return None
        head = os.read(fd, _HEAD).decode("utf-8", "replace")
    finally:
        os.close(fd)
    found = re.search(r'^declare -x HOME="([^"\n]*)"$', head, re.MULTILINE)
    return found.group(1) if found else None


def sweep(homes: Iterable[Path], tmp: Path = HOST_TMP) -> int:
    """Remove the session files of every snapshot in ``tmp`` that exports one of ``homes``; how many."""
    wanted = {str(h) for h in homes}
    if not wanted:
        return 0
    removed = 0
    try:
        names = os.listdir(tmp)
    except OSError:
        return 0
    for name in names:
        match = _SNAPSHOT.match(name)
        if match is None or _exported_home(tmp / name) not in wanted:
            continue
        session = match.group("session")
        for leftover in (name, f"hermes-cwd-{session}.txt"):
            with contextlib.suppress(FileNotFoundError):
                (tmp / leftover).unlink()
                removed += 1
    return removed
