"""lifecycle.gc-finalizer-during-sync: the collection the check makes is the environment's last one.

An environment still in use by a function on another thread (a command the backend has not finished
with) would be finalised later, on that thread; the check waits for it to let go, bounded, and
says unverified when it does not, never a failure of the plugin.
"""

from __future__ import annotations

import threading
import time

from conformance.checks import test_sync
from conformance.checks.test_sync import _released_elsewhere, _running_holders


class _Environment:
    def __init__(self) -> None:
        self.release = threading.Event()

    def execute(self) -> None:
        self.release.wait(30)


def test_a_method_running_on_another_thread_holds_the_environment():
    env = _Environment()
    assert _running_holders(env) == []  # this thread's own frames never count
    worker = threading.Thread(target=env.execute)
    worker.start()
    try:
        assert _running_holders(env) == ["execute (test_finalizer_check.py)"]
    finally:
        env.release.set()
        worker.join(5)
    assert _released_elsewhere(env) == []


def test_the_wait_for_a_holder_is_bounded_and_names_it(monkeypatch):
    monkeypatch.setattr(test_sync, "RELEASE_WAIT_S", 0.3)
    env = _Environment()
    worker = threading.Thread(target=env.execute)
    worker.start()
    try:
        started = time.monotonic()
        assert _released_elsewhere(env) == ["execute (test_finalizer_check.py)"]
        assert time.monotonic() - started < 5
    finally:
        env.release.set()
        worker.join(5)
