"""The deepinfra backend's configuration: secrets, the plan opt-in, persistence.

    DEEPINFRA_API_KEY        required; the account key (also used for DeepInfra inference)
    DEEPINFRA_SANDBOX_PLAN   optional; a catalog plan (small, medium, large, ...); unset = the service default
    DEEPINFRA_SANDBOX_BASE_URL  optional; another sandbox endpoint.  Not the SDK's DEEPINFRA_BASE_URL,
                             which Hermes's own DeepInfra inference provider reads too: a
                             setting of this backend changes nothing else of Hermes
    terminal.container_persistent  true: stop on idle, resume on the next command; false: terminate

All three variables are read through Hermes's secret scope.  A value that
cannot be used is a SettingsError naming the setting and the fix.  container_cpu and
container_memory are never mapped to a plan: Hermes fills in defaults for every
backend, and fitting those defaults into the catalog picks a dearer plan than
the service's own default for users who never asked for one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from reference.common.credentials import secret
from reference.common.errors import SettingsError
from reference.common.settings import container_persistent, terminal_settings

KEY_VAR = "DEEPINFRA_API_KEY"
PLAN_VAR = "DEEPINFRA_SANDBOX_PLAN"
URL_VAR = "DEEPINFRA_SANDBOX_BASE_URL"
# Required variables and how to get them.
CREDENTIALS = {
    KEY_VAR: f"create a key at https://deepinfra.com/dash/api_keys and add {KEY_VAR}=<key> to the "
    "profile's .env (~/.hermes/.env by default)"
}
INSTALL = "pip install 'hermes-backend-kit[deepinfra]'"
_PLAN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")

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
    """Settings from the host's container_config, config.yaml and the plan variable.

    A plan name is checked for its form here; whether the catalog offers it, the service says.
    """
    terminal = terminal_settings() if terminal is None else terminal
    persistent = container_persistent(container_config, terminal, True)
    plan = (secret(PLAN_VAR) or "").lower()
    if plan and not _PLAN.fullmatch(plan):
        raise SettingsError(
            PLAN_VAR,
            f"{plan!r} is not a plan name",
            f"set it to a plan of DeepInfra's sandbox catalog (small, medium, large, ...), "
            f"or unset {PLAN_VAR} for the default plan",
        )
    return Settings(persistent=persistent, plan=plan)
