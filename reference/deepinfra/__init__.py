"""deepinfra: a Hermes terminal backend that runs commands in DeepInfra sandboxes.

Install and select (the plugin is ``deepinfra-sandbox``; Hermes already
bundles unrelated plugins named ``deepinfra``, the backend is ``deepinfra``):

    pip install 'hermes-backend-kit[deepinfra]'
    hermes plugins enable deepinfra-sandbox
    hermes config set terminal.backend deepinfra
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("reference.deepinfra")


def register(ctx: Any) -> None:
    try:
        from reference.deepinfra.provider import DeepInfraProvider
    except ImportError as exc:
        logger.warning("deepinfra needs a Hermes with terminal backend plugins (%s); not registered", exc)
        return
    add = getattr(ctx, "register_terminal_environment_provider", None)
    if add is None:
        logger.warning("this Hermes cannot register terminal backends; deepinfra not registered")
        return
    add(DeepInfraProvider())
