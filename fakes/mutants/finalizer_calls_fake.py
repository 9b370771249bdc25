"""deepinfra, but what the collector frees calls the service from its finalizer and waits for the answer.

Every command leaves a small record in a reference cycle, so only the cyclic
garbage collector frees it, on whichever thread happens to trigger a
collection; its ``__del__`` asks the service for the sandbox's state with a
plain blocking HTTP request (a generous 60 s timeout, as a vendor client
might have).  Against a fake that serves from the backend's own interpreter,
a collection on the fake's event-loop thread makes that request wait for the
very loop it blocks: the fake stalls for the whole timeout, again at every
such collection, and checks that have nothing to do with finalizers hang.
A fake in its own process answers the request at once.

Not in MUTANTS: whether the suite catches it depends on where the collector
runs.  tests/test_fake_process.py runs checks against it and asserts the run
ends with a verdict for every check.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from typing import Any

from reference.deepinfra.environment import DeepInfraEnvironment
from reference.deepinfra.provider import DeepInfraProvider

WHAT = "a finalizer run by the cyclic collector makes a blocking HTTP call to the service"
FAKE = "deepinfra"
TIMEOUT_S = 60.0


class _StateProbe:
    """Garbage in a cycle: its finalizer asks the service about one sandbox and waits."""

    def __init__(self, sandbox_id: str):
        self.sandbox_id = sandbox_id
        self.cycle = self

    def __del__(self) -> None:
        base = os.environ.get("DEEPINFRA_BASE_URL", "").rstrip("/")
        key = os.environ.get("DEEPINFRA_API_KEY", "")
        if not base:
            return
        request = urllib.request.Request(
            f"{base}/v1/sandboxes/{self.sandbox_id}", headers={"Authorization": f"Bearer {key}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                response.read()
        except (OSError, urllib.error.URLError, ValueError):
            pass


_execute = DeepInfraEnvironment.execute


def _execute_leaving_a_probe(self: DeepInfraEnvironment, command: str, cwd: str = "", **kwargs: Any) -> Any:
    _StateProbe(self.sandbox_id)
    return _execute(self, command, cwd, **kwargs)


DeepInfraEnvironment.execute = _execute_leaving_a_probe  # type: ignore[method-assign,assignment]
provider = DeepInfraProvider()
