"""What every reference plugin does the same way: register, report its SDK, answer the prompt probe.

Imported by the plugins' ``__init__`` before anything of Hermes is: it must
import nothing from Hermes itself.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from typing import Any


def register_provider(ctx: Any, backend: str, load: Callable[[], Any]) -> None:
    """Register the provider ``load()`` builds; a Hermes that cannot take it gets a warning, not a crash."""
    logger = logging.getLogger(f"reference.{backend}")
    try:
        provider = load()
    except ImportError as exc:
        logger.warning("%s needs a Hermes with terminal backend plugins (%s); not registered", backend, exc)
        return
    add = getattr(ctx, "register_terminal_environment_provider", None)
    if add is None:
        logger.warning("this Hermes cannot register terminal backends; %s not registered", backend)
        return
    add(provider)


def sdk_version(module: str, distribution: str) -> str | None:
    """The installed SDK's version; None when it is not installed."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        from importlib.metadata import version

        return version(distribution)
    except Exception:
        return "unknown"


class PromptProbeStub:
    """What the prompt-time probe gets: describing the backend must not create (and bill) a sandbox."""

    def __init__(self, cwd: str, timeout: int, *, says: str):
        self.cwd, self.timeout, self._says = cwd, timeout, says

    def execute(self, command: str, cwd: str = "", **kwargs: Any) -> dict[str, Any]:
        return {"output": self._says, "returncode": 1}

    def cleanup(self, force_remove: bool = False) -> None:
        return None
