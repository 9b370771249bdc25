"""DeepInfraProvider: the provider Hermes registers for backend ``deepinfra``."""

from __future__ import annotations

import logging
from typing import Any

from agent.terminal_env_provider import TerminalEnvironmentProvider

from reference.common import workspace_binding as workspace
from reference.common.plugin import PromptProbeStub, sdk_version
from reference.common.redact import guard_loggers
from reference.deepinfra import settings as config

logger = logging.getLogger("reference.deepinfra")
PROBE_TASK = "prompt-backend-probe"
SDK_LOGGERS = ("httpx", "httpcore", "deepinfra")
INSTALL = "pip install 'hermes-backend-kit[deepinfra]'"


class DeepInfraProvider(TerminalEnvironmentProvider):
    name = "deepinfra"
    is_remote = True
    is_container = True
    # Every non-persistent environment creates its own sandbox anyway; sessions never share one.
    session_isolated_when_nonpersistent = True
    default_cwd = config.WORKSPACE
    # No stdin-stream: there is no stdin channel; stdin is carried in the command or staged as a file.
    conformance_capabilities = frozenset({"persistence", "file-sync"})
    conformance_disclaims = frozenset({"stdin-stream"})
    # The only directory a stop keeps, whatever terminal.cwd says.
    conformance_persistent_path = config.WORKSPACE

    @property
    def display_name(self) -> str:
        return "DeepInfra Sandbox"

    @property
    def description(self) -> str:
        return "Run terminal work in a DeepInfra sandbox: an isolated cloud microVM reached only through the API."

    @property
    def env_description(self) -> str:
        return "a DeepInfra sandbox (an isolated Linux microVM; /workspace is the persistent home)"

    @property
    def strip_env_keys(self) -> frozenset[str]:
        return frozenset({config.KEY_VAR})

    @property
    def cache_path_base(self) -> str:
        return config.HERMES_DIR

    @property
    def skip_container_guards(self) -> bool:
        return True  # commands run in an isolated microVM; no host path is ever mounted in

    def is_available(self) -> bool:
        try:
            return sdk_version("deepinfra", "deepinfra") is not None and config.secret(config.KEY_VAR) is not None
        except Exception:
            return False

    def check_requirements(self, terminal_config: dict[str, Any]) -> bool:
        if sdk_version("deepinfra", "deepinfra") is None:
            logger.warning("deepinfra needs the deepinfra SDK: %s", INSTALL)
            return False
        try:
            has_key = config.secret(config.KEY_VAR) is not None
        except Exception:
            has_key = False
        if not has_key:
            logger.warning("deepinfra needs %s: create a key at https://deepinfra.com/dash/api_keys and add it "
                           "to ~/.hermes/.env", config.KEY_VAR)
            return False
        return True

    def probe(self) -> tuple[str, str]:
        try:
            version = sdk_version("deepinfra", "deepinfra")
            if version is None:
                return ("unavailable", "the deepinfra SDK is not installed")
            if config.secret(config.KEY_VAR) is None:
                return ("needs_setup", f"{config.KEY_VAR} is not set")
            plan = config.secret(config.PLAN_VAR)
            return ("ready", f"deepinfra {version}, API key set, plan {plan or 'default'}")
        except Exception as exc:
            return ("unavailable", f"cannot read the configuration: {type(exc).__name__}")

    def doctor_checks(self) -> list[tuple[bool, str, str]]:
        version = sdk_version("deepinfra", "deepinfra")
        try:
            has_key = config.secret(config.KEY_VAR) is not None
            plan = config.secret(config.PLAN_VAR)
        except Exception:
            has_key, plan = False, None
        return [
            (version is not None, "deepinfra SDK", f"({version})" if version else f"(missing: {INSTALL})"),
            (has_key, config.KEY_VAR, "(set)" if has_key else "(missing: add it to ~/.hermes/.env)"),
            (True, config.PLAN_VAR, f"({plan})" if plan else "(unset: the service's default plan)"),
        ]

    def setup_instructions(self) -> list[str]:
        return [
            f"Add {config.KEY_VAR}=... (https://deepinfra.com/dash/api_keys) to ~/.hermes/.env.",
            f"Optional: {config.PLAN_VAR}=large in ~/.hermes/.env for a bigger plan (unset: the default plan).",
            "Enable the plugin with `hermes plugins enable deepinfra-sandbox` (not `deepinfra`: that name "
            "belongs to Hermes's bundled inference plugins).",
        ]

    def create_environment(self, *, cwd: str, timeout: int, task_id: str = "default", image: str | None = None,
                           container_config: dict[str, Any] | None = None, workspace_binding: Any = None,
                           **kwargs: Any) -> Any:
        workspace.check(workspace_binding, self.name)  # context only: nothing of it is mounted or synced
        if task_id == PROBE_TASK:
            return PromptProbeStub(cwd, timeout, says="deepinfra: the prompt-time probe does not create a sandbox")
        try:
            import deepinfra  # noqa: F401
        except ImportError as exc:
            raise ImportError(f"deepinfra needs the deepinfra SDK: {INSTALL}") from exc
        from reference.deepinfra.environment import DeepInfraEnvironment
        from reference.deepinfra.sandboxes import Account, connection_error

        api_key = config.secret(config.KEY_VAR)
        if api_key is None:
            raise connection_error(f"{config.KEY_VAR} is not set; add it to ~/.hermes/.env")
        guard_loggers(SDK_LOGGERS, api_key)
        if image:
            logger.info("deepinfra: sandboxes use DeepInfra's fixed base image; image %r is ignored", image)
        account = Account(api_key=api_key, base_url=config.secret(config.URL_VAR))
        settings = config.resolve(container_config)
        return DeepInfraEnvironment(account=account, settings=settings, task_id=str(task_id),
                                    cwd=cwd or self.default_cwd, timeout=int(timeout or 180))
