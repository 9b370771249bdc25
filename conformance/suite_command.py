"""The command line that runs the conformance suite in a child process.

Every runner builds it here (certify, the bench, the kit's tests), so a
suite run means the same thing wherever it starts: the checks collected from
the installed ``conformance.checks`` package, no ``.pytest_cache`` written
into the caller's directory, no plugin that serves no check, quiet output.  Standard library only, like
conformance/backends.py.
"""

from __future__ import annotations

import os
import sys

CHECKS_PACKAGE = "conformance.checks"


def command(
    *options: str, python: str | None = None, workers: int = 0, report: str | os.PathLike[str] | None = None
) -> list[str]:
    """``python -m pytest --pyargs conformance.checks`` with the kit's fixed options, then ``options``.

    ``workers``: pytest-xdist workers (0: none, the checks run in the child itself);
    ``report``: where the certification report goes (the plugin's ``--report``).
    """
    # The pytest plugins of anyio (which comes with httpx) and respx (the kit uses respx as a library for
    # client-side faults) serve no check; loading them costs each process of a run most of a second.
    cmd = [
        python or sys.executable,
        "-m",
        "pytest",
        "--pyargs",
        CHECKS_PACKAGE,
        "-p",
        "no:cacheprovider",
        "-p",
        "no:anyio",
        "-p",
        "no:respx",
        "-q",
    ]
    if workers:
        cmd += ["-n", str(workers)]
    if report is not None:
        cmd += ["--report", os.fspath(report)]
    return [*cmd, *options]
