"""line_exec: a backend whose commands reach their service over raw TCP (fakes/line_exec/server.py).

The fixture for ``--client-faults tcp:HOST:PORT``: neither httpx nor a
WebSocket carries its commands, so only the kit's TCP fault proxy can break
them.  ``provider`` handles a dropped connection as a failed command;
``lost_is_success`` reads one as a command that exited 0 (what the
transport clause faults.dropped-mid-command must catch).  Load them as
``fakes.line_exec:provider`` and ``fakes.line_exec:lost_is_success`` with
``LINE_EXEC_ADDR`` set to the service's address.
"""

from __future__ import annotations

from typing import Any


def _provider(mutant: bool) -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    from .environment import LineExecEnvironment

    class LostIsSuccessEnvironment(LineExecEnvironment):
        def _lost(self, output: str, why: str) -> tuple[str, int]:
            return output, 0

    provider = TempdirBoxProvider()
    provider.name = "line_exec_lost_is_success" if mutant else "line_exec"
    provider.environment_class = LostIsSuccessEnvironment if mutant else LineExecEnvironment
    return provider


def __getattr__(name: str) -> Any:
    # Loaded by module:attr without importing the host's ABI at import time.
    if name == "provider":
        return _provider(mutant=False)
    if name == "lost_is_success":
        return _provider(mutant=True)
    raise AttributeError(name)
