"""tempdir_box: a Hermes terminal backend whose boxes are temp directories.

The default system under test of hermes-backend-kit.  It is a real Hermes
plugin (plugin.yaml + register(ctx)) and passes every MUST clause that
applies to it; it isolates files and environment variables, not processes,
so it is a test double, not a sandbox.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("fakes.tempdir_box")


def register(ctx: Any) -> None:
    def make() -> Any:
        from .box_provider import TempdirBoxProvider

        return TempdirBoxProvider()

    register_made(ctx, make, "tempdir_box")


def register_made(ctx: Any, make: Callable[[], Any], name: str) -> None:
    """Register the provider ``make()`` builds; on a Hermes without terminal backend plugins (the ABI does
    not import, or ctx cannot take a provider) say so and register nothing.  The kit's fixture plugins
    built on tempdir_box register through this too."""
    try:
        provider = make()
    except ImportError as exc:
        logger.warning("%s needs a Hermes with terminal backend plugins (%s); not registered", name, exc)
        return
    add = getattr(ctx, "register_terminal_environment_provider", None)
    if add is None:
        logger.warning("this Hermes cannot register terminal backends; %s not registered", name)
        return
    add(provider)


def __getattr__(name: str) -> Any:
    # ``fakes.tempdir_box:provider`` works without importing the ABI at import time.
    if name == "provider":
        from .box_provider import TempdirBoxProvider

        return TempdirBoxProvider()
    raise AttributeError(name)
