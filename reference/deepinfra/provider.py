"""DeepInfraProvider: the provider Hermes registers for backend ``deepinfra``."""

from __future__ import annotations

from typing import Any

from reference.common.credentials import required, secret
from reference.common.provider import ReferenceProvider, Row, Sdk, Setup
from reference.deepinfra import settings as config


class DeepInfraProvider(ReferenceProvider):
    name = "deepinfra"
    display_name = "DeepInfra Sandbox"
    description = "Run terminal work in a DeepInfra sandbox: an isolated cloud microVM reached only through the API."
    env_description = "a DeepInfra sandbox (an isolated Linux microVM; /workspace is the persistent home)"
    cache_path_base = config.HERMES_DIR
    skip_container_guards = True  # commands run in an isolated microVM; no host path is ever mounted in
    default_cwd = config.WORKSPACE
    # No stdin-stream: there is no stdin channel; stdin is carried in the command or staged as a file.
    conformance_capabilities = frozenset({"persistence", "file-sync"})
    conformance_disclaims = frozenset({"stdin-stream"})
    # The only directory a stop keeps, whatever terminal.cwd says.
    conformance_persistent_path = config.WORKSPACE
    credentials = config.CREDENTIALS
    blocked = frozenset({config.KEY_VAR})
    sdk = Sdk("deepinfra", "deepinfra", config.INSTALL)
    client_loggers = ("httpx", "httpcore", "deepinfra")
    probe_stub = "the prompt-time probe does not create a sandbox"

    def setup_instructions(self) -> list[str]:
        return [
            f"Add {config.KEY_VAR}=... (https://deepinfra.com/dash/api_keys) to ~/.hermes/.env.",
            f"Optional: {config.PLAN_VAR}=large in ~/.hermes/.env for a bigger plan (unset: the default plan).",
            "Enable the plugin with `hermes plugins enable deepinfra-sandbox` (not `deepinfra`: that name "
            "belongs to Hermes's bundled inference plugins).",
        ]

    def configure(self, container_config: dict[str, Any] | None = None, *, image: str | None = None) -> Setup:
        credentials = required(self.credentials)
        if image:
            self.logger.info("deepinfra: sandboxes use DeepInfra's fixed base image; image %r is ignored", image)
        return Setup(credentials, config.resolve(container_config))

    def ready_detail(self, configured: Setup, version: str | None) -> str:
        return f"deepinfra {version}, API key set, plan {configured.settings.plan or 'default'}"

    def extra_doctor_rows(self, configured: Setup) -> list[Row]:
        plan = configured.settings.plan
        return [(True, config.PLAN_VAR, f"({plan})" if plan else "(unset: the service's default plan)")]

    def open(self, configured: Setup, *, task_id: str, cwd: str, timeout: int) -> Any:
        from reference.deepinfra.environment import DeepInfraEnvironment
        from reference.deepinfra.sandboxes import Account

        account = Account(api_key=configured.credentials[config.KEY_VAR], base_url=secret(config.URL_VAR))
        return DeepInfraEnvironment(
            account=account, settings=configured.settings, task_id=task_id, cwd=cwd or self.default_cwd, timeout=timeout
        )
