"""upstash_box: a Hermes terminal backend that runs commands in Upstash Boxes.

Install and select:

    pip install 'hermes-backend-kit[upstash]'
    hermes plugins enable upstash-box
    hermes config set terminal.backend upstash_box
"""

from __future__ import annotations

from typing import Any

from reference.common.plugin import register_provider


def register(ctx: Any) -> None:
    def load() -> Any:
        from reference.upstash_box.provider import UpstashBoxProvider

        return UpstashBoxProvider()

    register_provider(ctx, "upstash_box", load)
