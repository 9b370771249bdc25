"""``hermes-backend-kit bench``: the bench's options (options.py), run by conformance/bench/cli.py."""

from __future__ import annotations

import argparse
from typing import Any

from conformance.bench.options import DESCRIPTION, add_options


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="benchmark backends against local bash -c", description=DESCRIPTION)
    add_options(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from conformance.bench.cli import run  # the measuring code, only when a bench runs

    return run(args)
