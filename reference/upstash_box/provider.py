"""UpstashBoxProvider: the provider Hermes registers for backend ``upstash_box``."""

from __future__ import annotations

import logging
import os
from typing import Any

from agent.terminal_env_provider import TerminalEnvironmentProvider

from reference.common import workspace_binding as workspace
from reference.common.plugin import PromptProbeStub, sdk_version
from reference.common.redact import guard_loggers
from reference.upstash_box import settings as config

logger = logging.getLogger("reference.upstash_box")
PROBE_TASK = "prompt-backend-probe"
# Loggers of the SDK's HTTP and WebSocket clients; websockets logs handshake headers at DEBUG.
SDK_LOGGERS = ("websockets", "websockets.client", "websockets.sync.client", "httpx", "httpcore", "upstash_box")


class UpstashBoxProvider(TerminalEnvironmentProvider):
    name = "upstash_box"
    is_remote = True
    is_container = True
    session_isolated_when_nonpersistent = True
    default_cwd = "~"
    conformance_capabilities = frozenset({"persistence", "stdin-stream", "file-sync"})

    def __init__(self) -> None:
        # The SDK adds telemetry headers unless this is set; set it before any client exists.
        os.environ.setdefault("UPSTASH_DISABLE_TELEMETRY", "1")

    @property
    def display_name(self) -> str:
        return "Upstash Box"

    @property
    def description(self) -> str:
        return "Run terminal work in an Upstash Box, a cloud Linux container with its own filesystem."

    @property
    def env_description(self) -> str:
        return "an Upstash Box cloud container (Linux)"

    @property
    def strip_env_keys(self) -> frozenset[str]:
        return frozenset({config.KEY_VAR})

    @property
    def cache_path_base(self) -> str:
        return "~/.hermes"

    @property
    def skip_container_guards(self) -> bool:
        return True  # commands run in the Box, not on this machine

    def is_available(self) -> bool:
        try:
            return sdk_version("upstash_box", "upstash-box") is not None and config.secret(config.KEY_VAR) is not None
        except Exception:
            return False

    def check_requirements(self, terminal_config: dict[str, Any]) -> bool:
        if sdk_version("upstash_box", "upstash-box") is None:
            logger.warning("upstash_box needs the upstash-box SDK: pip install 'hermes-backend-kit[upstash]'")
            return False
        try:
            has_key = config.secret(config.KEY_VAR) is not None
        except Exception:  # UnscopedSecretError: multiplexed profiles, no scope around this call
            has_key = False
        if not has_key:
            logger.warning("upstash_box needs %s: create a Box API key in the Upstash console and add it "
                           "to ~/.hermes/.env", config.KEY_VAR)
            return False
        return True

    def probe(self) -> tuple[str, str]:
        try:
            version = sdk_version("upstash_box", "upstash-box")
            if version is None:
                return ("unavailable", "the upstash-box SDK is not installed")
            if config.secret(config.KEY_VAR) is None:
                return ("needs_setup", f"{config.KEY_VAR} is not set")
            where = "a custom endpoint" if config.secret(config.URL_VAR) else "the default endpoint"
            return ("ready", f"upstash-box {version}, API key set, {where}")
        except Exception as exc:
            return ("unavailable", f"cannot read the configuration: {type(exc).__name__}")

    def doctor_checks(self) -> list[tuple[bool, str, str]]:
        version = sdk_version("upstash_box", "upstash-box")
        try:
            has_key = config.secret(config.KEY_VAR) is not None
        except Exception:
            has_key = False
        return [
            (version is not None, "upstash-box SDK",
             f"({version})" if version else "(missing: pip install 'hermes-backend-kit[upstash]')"),
            (has_key, config.KEY_VAR, "(set)" if has_key else "(missing: add it to ~/.hermes/.env)"),
        ]

    def setup_instructions(self) -> list[str]:
        return [
            f"Create a Box API key in the Upstash console and add {config.KEY_VAR}=... to ~/.hermes/.env.",
            "Optional: hermes config set terminal.upstash_box_runtime python (Boxes default to node).",
            "Optional: hermes config set terminal.container_persistent false for one Box per session.",
        ]

    def create_environment(self, *, cwd: str, timeout: int, task_id: str = "default", image: str | None = None,
                           container_config: dict[str, Any] | None = None, workspace_binding: Any = None,
                           **kwargs: Any) -> Any:
        workspace.check(workspace_binding, self.name)  # context only: nothing of it is mounted or synced
        if task_id == PROBE_TASK:
            return PromptProbeStub(cwd, timeout, says="upstash_box: the prompt-time probe does not create a Box")
        try:
            import upstash_box  # noqa: F401
        except ImportError as exc:
            raise ImportError("upstash_box needs the upstash-box SDK: pip install 'hermes-backend-kit[upstash]'") from exc
        from reference.upstash_box.boxes import Account, connection_error
        from reference.upstash_box.environment import UpstashBoxEnvironment

        api_key = config.secret(config.KEY_VAR)
        if api_key is None:
            raise connection_error(f"{config.KEY_VAR} is not set; add it to ~/.hermes/.env")
        guard_loggers(SDK_LOGGERS, api_key)
        account = Account(api_key=api_key, base_url=config.secret(config.URL_VAR))
        settings = config.resolve(container_config, image=image)
        return UpstashBoxEnvironment(account=account, settings=settings, task_id=str(task_id),
                                     cwd=cwd or self.default_cwd, timeout=int(timeout or 180))
