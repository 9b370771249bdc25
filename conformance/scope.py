"""What a kit run changes in this process, captured so it can be put back.

``KitRun.start`` exports its fake's variables into ``os.environ`` and points
``tempfile`` at the run's TMPDIR.  Where several runs live in one process
(the bench's interleaved cold starts, the session machine's harnesses in a
test worker), each keeps the ``Scope`` it was started in and applies it
around its own work; ``restored()`` guarantees the process afterwards is as
it was before.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    """The process environment a run was set up in: ``os.environ`` and tempfile's directory."""

    environ: dict[str, str]
    tempdir: str | None

    @classmethod
    def capture(cls) -> Scope:
        return cls(dict(os.environ), tempfile.tempdir)

    def apply(self) -> None:
        if os.environ != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        tempfile.tempdir = self.tempdir


@contextmanager
def restored() -> Iterator[None]:
    """Whatever scopes are applied inside, the process environment afterwards is the one before."""
    before = Scope.capture()
    try:
        yield
    finally:
        before.apply()
