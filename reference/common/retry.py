"""Retry only what is safe to repeat, a bounded number of times, with backoff."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def retry(fn: Callable[[], T], *, attempts: int, retryable: Callable[[BaseException], bool],
          backoff_s: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> T:
    """Call ``fn``; on a retryable error try again, up to ``attempts`` calls in all."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts or not retryable(exc):
                raise
            sleep(backoff_s * 2 ** (attempt - 1))
    raise AssertionError("unreachable")
