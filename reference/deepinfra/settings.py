"""The deepinfra backend's configuration: secrets, the plan opt-in, persistence.

    DEEPINFRA_API_KEY        required; the account key (also used for DeepInfra inference)
    DEEPINFRA_SANDBOX_PLAN   optional; a catalog plan (small, medium, large, ...); unset = the service default
    DEEPINFRA_BASE_URL       optional; another endpoint (the SDK's own variable)
    terminal.container_persistent  true: stop on idle, resume on the next command; false: terminate

All three variables are read through Hermes's secret scope.  container_cpu and
container_memory are never mapped to a plan: Hermes fills in defaults for every
backend, and fitting those defaults into the catalog picks a dearer plan than
the service's own default for users who never asked for one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference.common.settings import as_bool, secret, terminal_settings

KEY_VAR = "DEEPINFRA_API_KEY"
PLAN_VAR = "DEEPINFRA_SANDBOX_PLAN"
URL_VAR = "DEEPINFRA_BASE_URL"

# The only directory of a sandbox that survives a stop/start; the backend makes it $HOME too.
WORKSPACE = "/workspace"
HERMES_DIR = f"{WORKSPACE}/.hermes"  # synced skills, cache and credential files (cache_path_base)
TRANSFER_DIR = f"{WORKSPACE}/.hermes_sync"  # sync archives and staged stdin, each removed after use
TEMP_DIR = f"{WORKSPACE}/.hermes-tmp"  # Hermes's session snapshot and background logs survive a stop

MAX_COMMAND_S = 30 * 60  # DeepInfra ends every command after 30 minutes
MAX_ACTIVE = 5  # active sandboxes per account, stopped ones included


@dataclass(frozen=True)
class Settings:
    persistent: bool = True
    plan: str = ""  # "" = the service's default plan


def resolve(container_config: dict[str, Any] | None, *, terminal: dict[str, Any] | None = None) -> Settings:
    """Settings from the host's container_config, config.yaml and the plan variable."""
    terminal = terminal_settings() if terminal is None else terminal
    cc = container_config or {}
    persistent = as_bool(cc.get("container_persistent", terminal.get("container_persistent")), True)
    return Settings(persistent=persistent, plan=(secret(PLAN_VAR) or "").lower())
