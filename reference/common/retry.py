"""Retry only what is safe to repeat, a bounded number of times, with backoff.

Safe to repeat: a read, a call keyed by its own id (the same call twice does
what it does once), and a request the service refused before doing anything
(429).  Never a command, and never a create that may have happened: a retry
could run it twice or make a second sandbox.  Which answers of a vendor mean
"refused" or "failed in transit" is that vendor's protocol; how often and how
long to try again is decided here, once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

ATTEMPTS = 3  # a safe call that failed in transit or with a server error
RATE_LIMITED_ATTEMPTS = 5  # a request refused with 429: 0.5 s doubling backoff, 7.5 s of waiting at most
BACKOFF_S = 0.5  # the first pause; each later one doubles


def pause_s(failures: int) -> float:
    """How long to wait after the ``failures``-th failure (1-based)."""
    return BACKOFF_S * 2.0 ** (failures - 1)


def status_code(exc: BaseException) -> int | None:
    """The HTTP status an SDK error carries (``status_code``), or None (transport errors carry none)."""
    code = getattr(exc, "status_code", None)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def retry(
    fn: Callable[[], T],
    *,
    attempts: int = ATTEMPTS,
    retryable: Callable[[BaseException], bool],
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``; on a retryable error try again, up to ``attempts`` calls in all."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts or not retryable(exc):
                raise
            sleep(pause_s(attempt))
    raise AssertionError("unreachable")
