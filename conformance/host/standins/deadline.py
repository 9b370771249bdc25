"""Stand-in for ``agent.deadline``: run a blocking call on a worker thread under a deadline.

Current hosts run every command's spawn and wait this way (BaseEnvironment.
execute), so a wait loop that never returns cannot hang the agent.  What a
backend sees: ``_run_bash`` and the wait run on a daemon worker thread, not
on the thread that called ``execute``; the worker runs in a copy of the
caller's context (context variables such as the secret scope survive the
hop, thread-locals do not).  Written from the behaviour described in
research/hermes-host.md section 3.3, not from Hermes code.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["BoundedResult", "DeadlineExpired", "clamp_timeout", "run_bounded_sync"]

logger = logging.getLogger("agent.deadline")

# About a year: "no bound" for every practical purpose, still safe for Event.wait.
MAX_TIMEOUT_S = 365 * 24 * 3600.0
# The caller waits in short slices so a KeyboardInterrupt reaches it promptly.
_WAIT_SLICE_S = 0.2


class DeadlineExpired(TimeoutError):
    """A deadline of this layer (not the backend's own timeout) passed."""

    def __init__(self, label: str, timeout_s: float):
        super().__init__(f"{label}: deadline of {timeout_s:.1f}s passed")
        self.label = label
        self.timeout_s = timeout_s


@dataclass(frozen=True)
class BoundedResult:
    """What a bounded call produced; the call's own exceptions are raised, never stored here."""

    timed_out: bool
    value: Any
    elapsed_s: float
    timeout_s: float | None
    label: str


def clamp_timeout(timeout: float | None) -> float | None:
    """None, non-numbers, NaN and values <= 0 mean unbounded (None); the rest are capped."""
    if timeout is None or isinstance(timeout, bool):
        return None
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        return None
    if math.isnan(value) or value <= 0:
        return None
    return min(value, MAX_TIMEOUT_S)


def run_bounded_sync(
    fn: Callable[[], Any],
    timeout: float | None,
    *,
    label: str = "operation",
    on_timeout: Callable[[], None] | None = None,
) -> BoundedResult:
    """Run ``fn`` on a daemon worker and wait at most ``timeout`` seconds for it.

    Unbounded calls run inline on the caller's thread.  An exception from
    ``fn`` is raised in the caller.  When the deadline passes, the worker is
    left running (abandoned), ``on_timeout`` runs on the caller's thread and
    the result says ``timed_out``.
    """
    bound = clamp_timeout(timeout)
    started = time.monotonic()
    if bound is None:
        return BoundedResult(False, fn(), time.monotonic() - started, None, label)
    outcome: dict[str, Any] = {}
    finished = threading.Event()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            outcome["value"] = context.run(fn)
        except BaseException as exc:  # handed to the caller below
            outcome["error"] = exc
        finally:
            finished.set()

    threading.Thread(target=work, name=f"deadline-{label}", daemon=True).start()
    ends = started + bound
    while not finished.is_set():
        left = ends - time.monotonic()
        if left <= 0:
            break
        finished.wait(min(_WAIT_SLICE_S, left))
    if not finished.is_set():
        logger.warning("%s did not finish within %.1fs; its worker is abandoned", label, bound)
        if on_timeout is not None:
            try:
                on_timeout()
            except Exception:
                logger.debug("on_timeout of %s failed", label, exc_info=True)
        return BoundedResult(True, None, time.monotonic() - started, bound, label)
    if "error" in outcome:
        raise outcome["error"]
    return BoundedResult(False, outcome.get("value"), time.monotonic() - started, bound, label)
