"""CloudflareSandboxProvider: the provider Hermes registers for backend ``cloudflare_sandbox``."""

from __future__ import annotations

from typing import Any

from reference.cloudflare_sandbox import settings as config
from reference.common.cwd import initial
from reference.common.plugin import PROBE_TASK_ID
from reference.common.provider import ReferenceProvider, Row


class CloudflareSandboxProvider(ReferenceProvider):
    name = "cloudflare_sandbox"
    display_name = "Cloudflare Sandbox"
    description = (
        "Run terminal work in a Cloudflare Container behind your own bridge Worker; idle "
        "workspaces are saved to snapshots and restored on the next command."
    )
    env_description = "a Cloudflare Container (Linux, user hermes, workspace /workspace)"
    cache_path_base = None  # Hermes's skills, cache and credentials stay on the host
    skip_container_guards = False  # the bearer token controls every workspace: keep Hermes's approval prompts
    default_cwd = config.DEFAULT_CWD
    # Honest capabilities: files persist in snapshots; Hermes's files are not synced into the
    # container; stdin is carried whole (and bounded), not streamed.
    conformance_capabilities = frozenset({"persistence"})
    conformance_disclaims = frozenset({"stdin-stream", "file-sync"})
    # What a snapshot keeps: the workspace, whatever terminal.cwd says ($HOME starts empty after a restore).
    conformance_persistent_path = config.DEFAULT_CWD
    credentials = config.CREDENTIALS
    blocked = config.STRIP_KEYS
    # The HTTP client's own loggers; masked so no record can carry a credential.
    client_loggers = ("httpx", "httpcore", "httpcore.http11", "httpcore.connection")
    # No probe stub: the prompt-time probe gets an ephemeral workspace of its own (init boots nothing).

    def setup_instructions(self) -> list[str]:
        return [
            "Deploy the bridge Worker (reference/cloudflare_sandbox/worker: npm ci && npx wrangler deploy) and "
            "store a token of 48+ random characters with npx wrangler secret put SANDBOX_API_TOKEN.",
            f"Add {config.ENDPOINT_VAR}=https://<worker>.<subdomain>.workers.dev and {config.TOKEN_VAR}=<the same "
            "token> to the profile's .env.",
            "Optional: hermes config set terminal.container_persistent true to keep workspaces in snapshots.",
        ]

    def configure(self, container_config: dict[str, Any] | None = None, *, image: str | None = None) -> config.Settings:
        return config.resolve(container_config)

    def ready_detail(self, configured: config.Settings, version: str | None) -> str:
        """Offline: the settings are checked, the Worker is not called."""
        mode = "persistent" if configured.persistent else "per-session"
        return f"Worker {configured.endpoint}, image {configured.image}, {mode} workspaces"

    def extra_doctor_rows(self, configured: config.Settings) -> list[Row]:
        return [
            (True, "Worker", f"({configured.endpoint})"),
            (True, "Cloudflare Access", "(service token set)" if configured.access else "(not used)"),
        ]

    def open(self, configured: config.Settings, *, task_id: str, cwd: str, timeout: int) -> Any:
        from reference.cloudflare_sandbox import identity
        from reference.cloudflare_sandbox.environment import CloudflareSandboxEnvironment

        s = configured
        probe = task_id == PROBE_TASK_ID
        persistent = s.persistent and not probe  # the probe never reuses or snapshots a real workspace
        key = s.workspace or task_id
        workspace_id = (
            identity.persistent_id(s.namespace, key)
            if persistent
            else identity.ephemeral_id(s.namespace, PROBE_TASK_ID if probe else key)
        )
        return CloudflareSandboxEnvironment(
            settings=s,
            workspace_id=workspace_id,
            task_id=task_id,
            cwd=initial(cwd, s.cwd),
            timeout=timeout,
            persistent=persistent,
            probe=probe,
        )
