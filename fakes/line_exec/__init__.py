"""line_exec: a backend whose commands reach their service over raw TCP (fakes/line_exec/server.py).

The fixture for ``--client-faults tcp:HOST:PORT``: neither httpx nor a
WebSocket carries its commands, so only the kit's TCP fault proxy can break
them.  ``provider`` opens a connection per command and handles a dropped
one as a failed command; ``pooled`` keeps one connection for its commands
(as an SSH ControlMaster does); ``lost_is_success`` reads a dropped
connection as a command that exited 0 (what the transport clause
faults.dropped-mid-command must catch).  Load them as
``fakes.line_exec:provider`` (``:pooled``, ``:lost_is_success``,
``:pooled_lost_is_success``) with ``LINE_EXEC_ADDR`` set to the service's
address.
"""

from __future__ import annotations

from typing import Any


def _provider(variant: str) -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    from .environment import LineExecEnvironment, PooledLineExecEnvironment

    base = PooledLineExecEnvironment if variant.startswith("pooled") else LineExecEnvironment
    environment: type[LineExecEnvironment] = base
    if variant.endswith("lost_is_success"):

        class LostIsSuccessEnvironment(base):  # type: ignore[valid-type,misc]
            def _lost(self, output: str, why: str) -> tuple[str, int]:
                return output, 0

        environment = LostIsSuccessEnvironment
    provider = TempdirBoxProvider()
    provider.name = "line_exec" if variant == "provider" else f"line_exec_{variant}"
    provider.environment_class = environment
    return provider


VARIANTS = ("provider", "pooled", "lost_is_success", "pooled_lost_is_success")


def __getattr__(name: str) -> Any:
    # Loaded by module:attr without importing the host's ABI at import time.
    if name in VARIANTS:
        return _provider(name)
    raise AttributeError(name)
