"""A run's credential variables: which exist, where each value came from, and what a run may invent.

The names are the backend's ``strip_env_keys``, the fake's secret variables and
the non-optional ``requires_env`` entries of plugin.yaml.  Each gets one origin:

- ``backend-config``: set by ``--backend-config``'s ``env:`` section;
- ``user environment``: set in the environment the kit was started from;
- ``fake-issued``: issued by the kit for a run against a fake: the fake's own
  keys, and a recognisable ``kit-secret-...`` value for every other unset
  name the backend strips, so that a leak of it into the sandbox, a log or
  the report is found;
- ``unset``: nobody set it (a ``requires_env`` name the fake does not know
  stays unset, so ``doctor`` can name it).

Only a run against a fake, or of a backend whose sandboxes are on this
machine (not ``is_remote``) and not ``--live``, gets invented values: nothing
it sends leaves the machine.  A run against a real service (``--live``, or a
remote backend with no fake) sends whatever it sends to that service, so an
invented key would reach the vendor and make a probe report a key that does
not exist: there an unset required variable stops the run before any check
(``CredentialError``, exit 2, naming the variable).  Values are
registered with conformance.redact and never leave this module in a report:
the report holds names and origins only.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from conformance import redact
from conformance.errors import CredentialError

ISSUED_PREFIX = "kit-secret-"  # every value the kit invents starts with it (kit tests look for it)

BACKEND_CONFIG = "backend-config"
USER = "user environment"
FAKE = "fake-issued"
UNSET = "unset"


@dataclass
class Credentials:
    """The run's credential variables: name -> origin, and the values a leak check looks for."""

    origins: dict[str, str] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)  # name -> value, for set names only

    def report(self) -> list[dict[str, str]]:
        """Names and origins for the report (never a value)."""
        return [{"name": name, "origin": origin} for name, origin in sorted(self.origins.items())]


def required_names(manifest: Any) -> list[str]:
    """plugin.yaml's ``requires_env`` names that are not marked ``optional: true``."""
    items = manifest.get("requires_env") if isinstance(manifest, dict) else None
    names = []
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict):
            if item.get("optional") is True:
                continue
            item = item.get("name")
        if isinstance(item, str) and item:
            names.append(item)
    return names


def _declared(provider: Any) -> set[str]:
    try:
        return {str(k) for k in provider.strip_env_keys}
    except Exception:
        return set()


def gather(
    *,
    provider: Any,
    manifest: Any,
    fake: Any,
    local: bool,
    config_env: Mapping[str, str],
    fake_env: Mapping[str, str],
    set_var: Callable[[str, str], None],
    backend: str,
) -> Credentials:
    """Decide each credential variable's value and origin; set the invented ones through ``set_var``.

    ``fake`` is None and ``local`` False for a run against a real service: then nothing is invented,
    and a required variable left unset raises CredentialError before any check runs.  ``local``: the
    backend's sandboxes are on this machine and the run is not --live.
    """
    invent = fake is not None or local
    required = required_names(manifest)
    seeded = _declared(provider)  # what a leak check looks for: the names the backend strips
    if fake is not None:
        seeded |= set(getattr(fake, "secret_vars", ()) or ())
        if getattr(fake, "credential_var", None):
            seeded.add(fake.credential_var)
    creds = Credentials()
    for name in sorted(seeded | set(required)):
        if name in fake_env:
            creds.origins[name] = FAKE
        elif name in config_env:
            creds.origins[name] = BACKEND_CONFIG
        elif os.environ.get(name):
            creds.origins[name] = USER
        elif invent and name in seeded:
            set_var(name, ISSUED_PREFIX + secrets.token_hex(12))
            creds.origins[name] = FAKE
        else:
            creds.origins[name] = UNSET
            continue
        value = os.environ.get(name, "")
        # A required variable that is no credential (an endpoint URL) is listed, never masked or leak-checked.
        if value and (name in seeded or redact.credential_name(name)):
            creds.values[name] = value
            redact.register(value)
    if not invent:
        _require(required, creds, backend)
    return creds


def _require(required: Iterable[str], creds: Credentials, backend: str) -> None:
    missing = [name for name in required if creds.origins.get(name) == UNSET]
    if not missing:
        return
    names = ", ".join(missing)
    raise CredentialError(
        f"{names} {'is' if len(missing) == 1 else 'are'} not set, and {backend} requires "
        f"{'it' if len(missing) == 1 else 'them'} (plugin.yaml requires_env) for a run against the real service",
        f"export {missing[0]}=... (or give it in --backend-config's env: section); the kit never invents a "
        "credential for a live run",
    )
