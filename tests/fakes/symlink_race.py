"""A hostile box for file-API tests: a box command keeps swapping one of its directories for a symlink out of it.

The command runs in the box like any other (``World.spawn``) and exchanges
the directory with a symlink to a host directory, atomically
(``renameat2(RENAME_EXCHANGE)``), every 0.2 ms: the name is always there,
half of the time as a link out of the box.  A fake that checks a path and
then opens it by name (following links) writes through the link whenever
the swap falls between its check and its write.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import TracebackType

from fakes.world import Box, BoxProcess, World

_LOOP = r"""
import ctypes, os, signal, sys, time
target, outside = sys.argv[1], sys.argv[2]
link = target + ".link"
os.makedirs(target, exist_ok=True)
os.symlink(outside, link)
libc = ctypes.CDLL(None, use_errno=True)
swaps = 0
def report(*_):
    print(swaps, flush=True)
    os._exit(0)
signal.signal(signal.SIGTERM, report)
print("ready", flush=True)
while True:  # RENAME_EXCHANGE: the name is a directory or a link to outside, never missing
    if libc.renameat2(-100, target.encode(), -100, link.encode(), 2) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
    swaps += 1
    time.sleep(0.0002)
"""


class SymlinkSwapper:
    """``relpath`` under the box's workspace is a directory, then a symlink to ``outside``, then again a directory..."""

    def __init__(self, world: World, box: Box, relpath: str, outside: Path):
        self.world, self.box, self.relpath, self.outside = world, box, relpath, outside
        self.proc: BoxProcess | None = None
        self.swaps = 0

    def __enter__(self) -> SymlinkSwapper:
        target = f"{self.world.box_workspace(self.box)}/{self.relpath}"
        self.proc = self.world.spawn(self.box, argv=["python3", "-c", _LOOP, target, str(self.outside)])
        self.proc.stdin.close()
        assert self.proc.stdout.readline().strip() == b"ready", self.proc.stderr.read()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self.proc is not None
        alive = self.proc.poll() is None
        self.proc.signal(signal.SIGTERM)
        self.proc.wait(10)
        out, err = self.proc.stdout.read(), self.proc.stderr.read()
        assert alive, f"the swapping command ended early: {err.decode(errors='replace')[-500:]}"
        self.swaps = int(out.split()[-1])


def escaped(outside: Path) -> list[str]:
    """Every file or directory that landed in the host directory."""
    return sorted(
        os.path.relpath(os.path.join(d, n), outside) for d, dirs, files in os.walk(outside) for n in (*dirs, *files)
    )
