"""Where the interpreters of one kit run keep compiled bytecode.

A run starts many interpreters that import the same modules: pytest's
controller and workers, each fake's own process, Box Lite's box daemons.
Python keeps their bytecode next to the sources; where the user has switched
that off (``PYTHONDONTWRITEBYTECODE``), each of those interpreters compiles
every module it imports again, and pytest rewrites the asserts of every
pytest-plugin package again (all of hypothesis among them): seconds of CPU
per process, most of a short run's cost.  Then the run gives its interpreters
a bytecode cache of its own under its temp root (``PYTHONPYCACHEPREFIX``),
removed with the root, so nothing is written next to any source, as the user
asked.  Where writing is on, or the user named a prefix, Python's own cache
serves and nothing changes.

Standard library only: certify and the pytest plugin both decide here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path

PREFIX_VAR = "PYTHONPYCACHEPREFIX"
OFF_VAR = "PYTHONDONTWRITEBYTECODE"


def run_cache(root: Path, environ: Mapping[str, str] = os.environ) -> dict[str, str | None]:
    """The variables (None: unset) that give a run's interpreters a cache under ``root``; {} when none is needed."""
    if environ.get(PREFIX_VAR) or not environ.get(OFF_VAR):
        return {}
    return {PREFIX_VAR: str(root / "pycache"), OFF_VAR: None}


def apply(changes: Mapping[str, str | None], environ: MutableMapping[str, str]) -> dict[str, str | None]:
    """Make ``changes`` in ``environ``; return what to put back (None: unset)."""
    before = {name: environ.get(name) for name in changes}
    for name, value in changes.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return before


def use_in_this_process(changes: Mapping[str, str | None]) -> tuple[str | None, bool]:
    """This interpreter's later imports use the run's cache too; return (prefix, dont_write) to restore."""
    before = (sys.pycache_prefix, sys.dont_write_bytecode)
    if changes.get(PREFIX_VAR):
        sys.pycache_prefix = changes[PREFIX_VAR]
        sys.dont_write_bytecode = False
    return before


def restore_in_this_process(before: tuple[str | None, bool]) -> None:
    sys.pycache_prefix, sys.dont_write_bytecode = before
