"""CloudflareSandboxProvider: the provider Hermes registers for backend ``cloudflare_sandbox``."""

from __future__ import annotations

import logging
from typing import Any

from agent.terminal_env_provider import TerminalEnvironmentProvider

from reference.cloudflare_sandbox import settings as config
from reference.common import workspace_binding as workspace
from reference.common.redact import guard_loggers

logger = logging.getLogger("reference.cloudflare_sandbox")
PROBE_TASK = "prompt-backend-probe"
# The HTTP client's own loggers; masked so no record can carry a credential.
CLIENT_LOGGERS = ("httpx", "httpcore", "httpcore.http11", "httpcore.connection")


class CloudflareSandboxProvider(TerminalEnvironmentProvider):
    name = "cloudflare_sandbox"
    is_remote = True
    is_container = True
    session_isolated_when_nonpersistent = True
    default_cwd = config.DEFAULT_CWD
    # Honest capabilities: files persist in snapshots; Hermes's files are not synced into the
    # container; stdin is carried whole (and bounded), not streamed.
    conformance_capabilities = frozenset({"persistence"})
    conformance_disclaims = frozenset({"stdin-stream", "file-sync"})
    # What a snapshot keeps: the workspace, whatever terminal.cwd says ($HOME starts empty after a restore).
    conformance_persistent_path = config.DEFAULT_CWD

    @property
    def display_name(self) -> str:
        return "Cloudflare Sandbox"

    @property
    def description(self) -> str:
        return ("Run terminal work in a Cloudflare Container behind your own bridge Worker; idle "
                "workspaces are saved to snapshots and restored on the next command.")

    @property
    def env_description(self) -> str:
        return "a Cloudflare Container (Linux, user hermes, workspace /workspace)"

    @property
    def strip_env_keys(self) -> frozenset[str]:
        return config.STRIP_KEYS

    @property
    def cache_path_base(self) -> str | None:
        return None  # Hermes's skills, cache and credentials stay on the host

    @property
    def skip_container_guards(self) -> bool:
        return False  # the bearer token controls every workspace: keep Hermes's approval prompts

    def _settings(self, container_config: dict[str, Any] | None = None) -> config.Settings:
        return config.resolve(container_config)

    def is_available(self) -> bool:
        try:
            return config.secret(config.ENDPOINT_VAR) is not None and config.secret(config.TOKEN_VAR) is not None
        except Exception:
            return False

    def check_requirements(self, terminal_config: dict[str, Any]) -> bool:
        try:
            self._settings()
        except config.SettingsError as exc:
            logger.warning("cloudflare_sandbox is not usable: %s", exc)
            return False
        except Exception as exc:
            logger.warning("cloudflare_sandbox cannot read its settings (%s)", type(exc).__name__)
            return False
        return True

    def probe(self) -> tuple[str, str]:
        """Offline: the settings are checked, the Worker is not called."""
        try:
            if config.secret(config.ENDPOINT_VAR) is None or config.secret(config.TOKEN_VAR) is None:
                return ("needs_setup", f"{config.ENDPOINT_VAR} and {config.TOKEN_VAR} must be set")
            s = self._settings()
            mode = "persistent" if s.persistent else "per-session"
            return ("ready", f"Worker {s.endpoint}, image {s.image}, {mode} workspaces")
        except config.SettingsError as exc:
            return ("needs_setup", str(exc))
        except Exception as exc:
            return ("unavailable", f"cannot read the configuration: {type(exc).__name__}")

    def doctor_checks(self) -> list[tuple[bool, str, str]]:
        rows: list[tuple[bool, str, str]] = []
        try:
            s = self._settings()
            rows.append((True, config.ENDPOINT_VAR, f"({s.endpoint})"))
            rows.append((True, config.TOKEN_VAR, "(set)"))
            rows.append((True, "Cloudflare Access", "(service token set)" if s.access else "(not used)"))
        except config.SettingsError as exc:
            rows.append((False, "cloudflare_sandbox settings", f"({exc})"))
        except Exception as exc:
            rows.append((False, "cloudflare_sandbox settings", f"(unreadable: {type(exc).__name__})"))
        return rows

    def setup_instructions(self) -> list[str]:
        return [
            "Deploy the bridge Worker (reference/cloudflare_sandbox/worker: npm ci && npx wrangler deploy) and "
            "store a token of 48+ random characters with npx wrangler secret put SANDBOX_API_TOKEN.",
            f"Add {config.ENDPOINT_VAR}=https://<worker>.<subdomain>.workers.dev and {config.TOKEN_VAR}=<the same "
            "token> to the profile's .env.",
            "Optional: hermes config set terminal.container_persistent true to keep workspaces in snapshots.",
        ]

    def create_environment(self, *, cwd: str, timeout: int, task_id: str = "default", image: str | None = None,
                           container_config: dict[str, Any] | None = None, workspace_binding: Any = None,
                           **kwargs: Any) -> Any:
        workspace.check(workspace_binding, self.name)  # context only: nothing of it is mounted or synced
        from reference.cloudflare_sandbox import identity
        from reference.cloudflare_sandbox.environment import CloudflareSandboxEnvironment
        from reference.cloudflare_sandbox.errors import connection_error

        try:
            s = self._settings(container_config)
        except config.SettingsError as exc:
            raise connection_error(str(exc), hint="fix the setting named above and try again") from None
        guard_loggers(CLIENT_LOGGERS, s.token)
        for value in s.access or ():
            guard_loggers(CLIENT_LOGGERS, value)
        task = str(task_id)
        probe = task == PROBE_TASK
        persistent = s.persistent and not probe  # the probe never reuses or snapshots a real workspace
        key = s.workspace or task
        workspace_id = (identity.persistent_id(s.namespace, key) if persistent
                        else identity.ephemeral_id(s.namespace, PROBE_TASK if probe else key))
        return CloudflareSandboxEnvironment(settings=s, workspace_id=workspace_id, task_id=task,
                                            cwd=cwd or s.cwd, timeout=int(timeout or 180),
                                            persistent=persistent, probe=probe)
