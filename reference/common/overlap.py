"""Two independent steps of an environment's start, run at once.

A new sandbox needs Hermes's files synced and the host's session bootstrap
run before its first command; neither reads what the other writes (the files
go under the sandbox's ``.hermes``, the snapshot to its temp dir), so each
backend runs them side by side and its cold start pays for the longer of the
two rather than their sum.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable


def alongside(side: Callable[[], None], main: Callable[[], None], *, name: str) -> None:
    """Run ``side`` on a thread of its own (in the caller's context: its secret scope goes with it)
    while ``main`` runs here; return when both have ended.  ``main``'s exception wins; otherwise
    ``side``'s is raised here."""
    failed: list[BaseException] = []
    context = contextvars.copy_context()

    def run() -> None:
        try:
            context.run(side)
        except BaseException as exc:
            failed.append(exc)

    worker = threading.Thread(target=run, daemon=True, name=name)
    worker.start()
    try:
        main()
    finally:
        worker.join()
    if failed:
        raise failed[0]
