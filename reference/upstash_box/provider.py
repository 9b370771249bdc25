"""UpstashBoxProvider: the provider Hermes registers for backend ``upstash_box``."""

from __future__ import annotations

import os
from typing import Any

from reference.common.credentials import required
from reference.common.cwd import initial
from reference.common.provider import ReferenceProvider, Sdk, Setup
from reference.upstash_box import settings as config


class UpstashBoxProvider(ReferenceProvider):
    name = "upstash_box"
    display_name = "Upstash Box"
    description = "Run terminal work in an Upstash Box, a cloud Linux container with its own filesystem."
    env_description = "an Upstash Box cloud container (Linux)"
    cache_path_base = "~/.hermes"
    skip_container_guards = True  # commands run in the Box, not on this machine
    default_cwd = "~"
    conformance_capabilities = frozenset({"persistence", "stdin-stream", "file-sync"})
    credentials = config.CREDENTIALS
    blocked = frozenset({config.KEY_VAR})
    sdk = Sdk("upstash_box", "upstash-box", config.INSTALL)
    # Loggers of the SDK's HTTP and WebSocket clients; websockets logs handshake headers at DEBUG.
    client_loggers = ("websockets", "websockets.client", "websockets.sync.client", "httpx", "httpcore", "upstash_box")
    probe_stub = "the prompt-time probe does not create a Box"

    def __init__(self) -> None:
        # The SDK adds telemetry headers unless this is set; set it before any client exists.
        os.environ.setdefault("UPSTASH_DISABLE_TELEMETRY", "1")

    def setup_instructions(self) -> list[str]:
        return [
            f"Create a Box API key in the Upstash console and add {config.KEY_VAR}=... to ~/.hermes/.env.",
            "Optional: hermes config set terminal.upstash_box_runtime python (Boxes default to node).",
            "Optional: hermes config set terminal.container_persistent false for one Box per session.",
        ]

    def configure(self, container_config: dict[str, Any] | None = None, *, image: str | None = None) -> Setup:
        credentials = required(self.credentials)
        return Setup(credentials, config.resolve(container_config, image=image))

    def ready_detail(self, configured: Any, version: str | None) -> str:
        where = "a custom endpoint" if config.secret(config.URL_VAR) else "the default endpoint"
        return f"upstash-box {version}, API key set, {where}"

    def open(self, configured: Setup, *, task_id: str, cwd: str, timeout: int) -> Any:
        from reference.upstash_box.boxes import Account
        from reference.upstash_box.environment import UpstashBoxEnvironment

        account = Account(api_key=configured.credentials[config.KEY_VAR], base_url=config.secret(config.URL_VAR))
        return UpstashBoxEnvironment(
            account=account,
            settings=configured.settings,
            task_id=task_id,
            cwd=initial(cwd, self.default_cwd),
            timeout=timeout,
        )
