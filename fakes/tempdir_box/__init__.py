"""tempdir_box: a Hermes terminal backend whose boxes are temp directories.

The default system under test of hermes-backend-kit.  It is a real Hermes
plugin (plugin.yaml + register(ctx)) and passes every MUST clause that
applies to it; it isolates files and environment variables, not processes,
so it is a test double, not a sandbox.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("fakes.tempdir_box")


def register(ctx: Any) -> None:
    try:
        from .box_provider import TempdirBoxProvider
    except ImportError as exc:
        logger.warning("tempdir_box needs a Hermes with terminal backend plugins (%s); not registered", exc)
        return
    add = getattr(ctx, "register_terminal_environment_provider", None)
    if add is None:
        logger.warning("this Hermes cannot register terminal backends; tempdir_box not registered")
        return
    add(TempdirBoxProvider())


def __getattr__(name: str) -> Any:
    # ``fakes.tempdir_box:provider`` works without importing the ABI at import time.
    if name == "provider":
        from .box_provider import TempdirBoxProvider

        return TempdirBoxProvider()
    raise AttributeError(name)
