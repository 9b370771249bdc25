"""Which optional capabilities a run has, and how each was established.

Three sources, named per capability in contract.yaml (``determined_by``):

- declared: the backend claims it.  First found wins: the ``capabilities``
  list of --backend-config, the provider's ``conformance_capabilities``
  attribute, the ``conformance: capabilities:`` list of plugin.yaml.
- provider: read off the provider and how it was loaded (is_remote, ...).
- harness: what the fake service's world can do (inspect, disturb).

A clause that needs a declared or provider capability the run lacks is "not
applicable" (the backend does not claim it); one that needs a harness
capability the run lacks is "unverified" (the kit could not observe it), and
never counts toward certification.  conformance.verdicts decides which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.contract import Contract


@dataclass(frozen=True)
class Capabilities:
    present: frozenset[str]
    declared_by: str  # where the declared set came from
    declared: frozenset[str]

    def has(self, name: str) -> bool:
        return name in self.present


def _declared(contract: Contract, provider: Any, manifest: dict[str, Any] | None,
              config_caps: list[str] | None) -> tuple[frozenset[str], str]:
    declarable = {n for n, c in contract.capabilities.items() if c["determined_by"] == "declared"}
    if config_caps is not None:
        return frozenset(config_caps) & declarable, "backend-config"
    try:
        attr = getattr(provider, "conformance_capabilities", None)
    except Exception:
        attr = None
    if attr is not None:
        return frozenset(str(c) for c in attr) & declarable, "provider attribute conformance_capabilities"
    listed = ((manifest or {}).get("conformance") or {}).get("capabilities")
    if isinstance(listed, list):
        return frozenset(str(c) for c in listed) & declarable, "plugin.yaml conformance.capabilities"
    return frozenset(), "none"


def _flag(provider: Any, attr: str) -> bool:
    try:
        return getattr(provider, attr) is True
    except Exception:
        return False


def _overrides_config_schema(provider: Any) -> bool:
    from conformance.host.registry import provider_base_class

    try:
        mine = provider.get_config_schema
    except Exception:
        return False
    base = provider_base_class().get_config_schema
    return getattr(mine, "__func__", mine) is not base


def resolve(contract: Contract, *, provider: Any, loaded: Any, config_caps: list[str] | None,
            world: Any) -> Capabilities:
    declared, source = _declared(contract, provider, getattr(loaded, "manifest", None), config_caps)
    present = set(declared)
    if _flag(provider, "is_remote"):
        present.add("remote")
    if _flag(provider, "session_isolated_when_nonpersistent"):
        present.add("session-isolation")
    if _overrides_config_schema(provider):
        present.add("config-schema")
    if getattr(loaded, "is_package", False):
        present.add("plugin-package")
    if getattr(loaded, "entry_point", None):
        present.add("distribution")
    if world is not None:
        present |= set(getattr(world, "capabilities", ()))
    unknown = present - set(contract.capabilities)
    return Capabilities(frozenset(present - unknown), source, declared)
