"""cloudflare_sandbox: a Hermes terminal backend that runs commands in Cloudflare Containers
through a bridge Worker (bridge protocol v1, plus the concurrent-exec and large-output
extensions when the Worker offers them).

Install and select:

    pip install hermes-backend-kit
    hermes plugins enable cloudflare-sandbox
    hermes config set terminal.backend cloudflare_sandbox
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("reference.cloudflare_sandbox")


def register(ctx: Any) -> None:
    try:
        from reference.cloudflare_sandbox.provider import CloudflareSandboxProvider
    except ImportError as exc:
        logger.warning("cloudflare_sandbox needs a Hermes with terminal backend plugins (%s); not registered", exc)
        return
    add = getattr(ctx, "register_terminal_environment_provider", None)
    if add is None:
        logger.warning("this Hermes cannot register terminal backends; cloudflare_sandbox not registered")
        return
    add(CloudflareSandboxProvider())
