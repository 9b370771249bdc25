"""cloudflare_sandbox: a Hermes terminal backend that runs commands in Cloudflare Containers
through a bridge Worker (bridge protocol v1, plus the concurrent-exec and large-output
extensions when the Worker offers them).

Install and select:

    pip install hermes-backend-kit
    hermes plugins enable cloudflare-sandbox
    hermes config set terminal.backend cloudflare_sandbox
"""

from __future__ import annotations

from typing import Any

from reference.common.plugin import register_provider


def register(ctx: Any) -> None:
    def load() -> Any:
        from reference.cloudflare_sandbox.provider import CloudflareSandboxProvider

        return CloudflareSandboxProvider()

    register_provider(ctx, "cloudflare_sandbox", load)
