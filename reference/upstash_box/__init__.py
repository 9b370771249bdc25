"""upstash_box: a Hermes terminal backend that runs commands in Upstash Boxes.

Install and select:

    pip install 'hermes-backend-kit[upstash]'
    hermes plugins enable upstash-box
    hermes config set terminal.backend upstash_box
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("reference.upstash_box")


def register(ctx: Any) -> None:
    try:
        from reference.upstash_box.provider import UpstashBoxProvider
    except ImportError as exc:
        logger.warning("upstash_box needs a Hermes with terminal backend plugins (%s); not registered", exc)
        return
    add = getattr(ctx, "register_terminal_environment_provider", None)
    if add is None:
        logger.warning("this Hermes cannot register terminal backends; upstash_box not registered")
        return
    add(UpstashBoxProvider())
