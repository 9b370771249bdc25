"""Credentials: read through Hermes's secret scope, and what a broken scope means.

Every variable a reference backend reads (keys, tokens, endpoints) comes from
the host's ``agent.secret_scope.get_secret``, which serves the active profile's
values.  When that read fails (get_secret raises UnscopedSecretError when
profiles are multiplexed and no profile's scope is active), the variable
cannot be read: that is a SettingsError naming it, and never a reason to look
in os.environ, which may hold another profile's value.  So a broken scope
counts as a missing credential: the status calls (is_available, probe,
doctor_checks, check_requirements) report the backend not ready and name the
variable, and create_environment refuses.  A host without
``agent.secret_scope`` has no profiles to keep apart: its environment is the
only one, and the variable is read there.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from reference.common.errors import SettingsError

Read = Callable[[str], str | None]

SCOPE_FIX = (
    "use the backend inside a profile's session (each profile's secret scope is installed around its "
    "work), or turn profile multiplexing off"
)


def secret(name: str) -> str | None:
    """One variable from Hermes's secret scope; stripped, None when unset or blank.

    SettingsError naming ``name`` when the scope cannot be read.
    """
    try:
        from agent.secret_scope import get_secret
    except ImportError:
        value: object = os.environ.get(name)
    else:
        try:
            value = get_secret(name)
        except Exception as exc:
            raise SettingsError(
                name,
                f"cannot be read from Hermes's secret scope ({type(exc).__name__}), and "
                "it is never read from anywhere else",
                SCOPE_FIX,
            ) from None
    return value.strip() if isinstance(value, str) and value.strip() else None


def require(name: str, fix: str, read: Read = secret) -> str:
    """The value of a required variable; SettingsError ``<name> is not set; <fix>`` without one."""
    value = read(name)
    if value is None:
        raise SettingsError(name, "is not set", fix)
    return value


def required(credentials: Mapping[str, str], read: Read = secret) -> dict[str, str]:
    """Every required variable (name: how to get it), read in order; the first missing one raises."""
    return {name: require(name, fix, read) for name, fix in credentials.items()}


@dataclass
class ApiKeyAccount:
    """A vendor account reached with an API key, at the vendor's endpoint or another one."""

    api_key: str = field(repr=False)
    base_url: str | None = None

    @property
    def secrets(self) -> tuple[str | None, ...]:
        """Values that must never appear in a message, a log or the sandbox."""
        return (self.api_key,)
