"""deepinfra: a Hermes terminal backend that runs commands in DeepInfra sandboxes.

Install and select (the plugin is ``deepinfra-sandbox``; Hermes already
bundles unrelated plugins named ``deepinfra``, the backend is ``deepinfra``):

    pip install 'hermes-backend-kit[deepinfra]'
    hermes plugins enable deepinfra-sandbox
    hermes config set terminal.backend deepinfra
"""

from __future__ import annotations

from typing import Any

from reference.common.plugin import register_provider


def register(ctx: Any) -> None:
    def load() -> Any:
        from reference.deepinfra.provider import DeepInfraProvider

        return DeepInfraProvider()

    register_provider(ctx, "deepinfra", load)
