"""Run a backend call on a worker thread with a deadline, and interrupt it.

A broken backend must fail a check, not hang the suite.  ``bounded`` runs the
call on its own thread so the caller can give up; ``interrupt`` sets Hermes's
per-thread interrupt flag on that thread, exactly as the agent does.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class CallHung(AssertionError):
    """The backend call did not return within its deadline."""


class Call(Generic[T]):
    """One backend call running on its own thread."""

    _value: T  # set by the worker when the call returns

    def __init__(self, fn: Callable[..., T], *args: Any, **kwargs: Any):
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self._done = threading.Event()
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name="backend-call")
        self.thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn(*self._args, **self._kwargs)
        except BaseException as exc:
            self._error = exc
        finally:
            _set_interrupt(False, threading.get_ident())
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def interrupt(self) -> None:
        _set_interrupt(True, self.thread.ident)

    def result(self, timeout: float, what: str = "the call") -> T:
        if not self._done.wait(timeout):
            raise CallHung(f"{what} did not return within {timeout:g}s")
        if self._error is not None:
            raise self._error
        return self._value


def _set_interrupt(active: bool, thread_id: int | None) -> None:
    module = importlib.import_module("tools.interrupt")
    module.set_interrupt(active, thread_id)


def bounded(fn: Callable[..., T], *args: Any, deadline: float, what: str = "the call", **kwargs: Any) -> T:
    return Call(fn, *args, **kwargs).result(deadline, what)
