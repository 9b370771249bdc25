"""Which optional capabilities a run has, and how each was established.

Three sources, named per capability in contract.yaml (``determined_by``):

- declared: the backend claims it, or disclaims it.  The first of these
  that says anything speaks for the backend, both its claims and its
  disclaimers: the ``capabilities`` and ``disclaims`` lists of
  --backend-config, the provider's ``conformance_capabilities`` and
  ``conformance_disclaims`` attributes, the ``conformance: capabilities:`` and
  ``conformance: disclaims:`` lists of plugin.yaml.
- provider: read off the provider and how it was loaded (is_remote, ...),
  including the backend's kind (``conformance_backend_kind``): a host-attached
  backend lacks ``per-task-sandbox``.
- harness: what the fake service's world can do (inspect, disturb), and
  ``sandbox-delete``: the vendor's own delete (the provider's
  ``conformance_delete_sandbox(env)``) or a world that can delete.

A declared capability the backend neither declares nor disclaims is
undeclared.  The kit looks for signs that the backend implements it anyway
(conformance.signs); one with signs is probed: it counts as present, so its
clauses run.  conformance.verdicts says what a probe's failures mean.

A clause that needs a declared or provider capability the run lacks is "not
applicable" (the backend does not claim it); one that needs a harness
capability the run lacks is "unverified" (the kit could not observe it), and
never counts toward certification.  conformance.verdicts decides which.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from conformance import signs
from conformance.contract import Contract
from conformance.errors import CapabilityError

DELETE_HOOK = "conformance_delete_sandbox"
# The backend's kind, declared by the provider's conformance_backend_kind: a "sandbox" backend (the
# default) has the per-task-sandbox capability, a "host-attached" one (commands run on one machine every
# task shares, as Hermes's local and ssh backends) does not.
KIND_ATTR = "conformance_backend_kind"
BACKEND_KINDS = ("sandbox", "host-attached")


@dataclass(frozen=True)
class Capabilities:
    present: frozenset[str]
    declared_by: str  # where the declared (and disclaimed) set came from
    declared: frozenset[str]
    disclaimed: frozenset[str] = frozenset()
    # Declarable capabilities neither declared nor disclaimed: their signs of support (empty: none found).
    undeclared: dict[str, tuple[str, ...]] = field(default_factory=dict)
    kind: str = "sandbox"  # one of BACKEND_KINDS
    kind_source: str = "default"  # who said so: backend-config, plugin.yaml, provider attribute, inferred, default

    def has(self, name: str) -> bool:
        return name in self.present

    @property
    def probed(self) -> frozenset[str]:
        """Undeclared capabilities with signs of support: their clauses run as a probe."""
        return frozenset(n for n, found in self.undeclared.items() if found)

    def context(self) -> dict[str, Any]:
        """The report's view (backend section)."""
        return {
            "capabilities": sorted(self.present),
            "declared_capabilities": sorted(self.declared),
            "disclaimed_capabilities": sorted(self.disclaimed),
            "undeclared_capabilities": {n: list(found) for n, found in sorted(self.undeclared.items())},
            "declared_by": self.declared_by,
            "kind": self.kind,
            "kind_source": self.kind_source,
        }


def declarable(contract: Contract) -> frozenset[str]:
    return frozenset(n for n, c in contract.capabilities.items() if c["determined_by"] == "declared")


def _names(value: Any) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return frozenset({value})
    try:
        return frozenset(str(c) for c in value)
    except TypeError:
        return None


def _attr(provider: Any, name: str) -> Any:
    try:
        return getattr(provider, name, None)
    except Exception:
        return None


def _declared(
    contract: Contract,
    provider: Any,
    manifest: dict[str, Any] | None,
    config_caps: list[str] | None,
    config_disclaims: list[str] | None,
) -> tuple[frozenset[str], frozenset[str], str]:
    """(declared, disclaimed, source): the first source saying anything speaks for the backend."""
    names = declarable(contract)
    section = (manifest or {}).get("conformance") or {}
    section = section if isinstance(section, dict) else {}
    sources: list[tuple[str, tuple[str, str], Any, Any]] = [
        ("backend-config", ("capabilities", "disclaims"), config_caps, config_disclaims),
        (
            "provider attribute",
            ("conformance_capabilities", "conformance_disclaims"),
            _attr(provider, "conformance_capabilities"),
            _attr(provider, "conformance_disclaims"),
        ),
        (
            "plugin.yaml",
            ("conformance.capabilities", "conformance.disclaims"),
            section.get("capabilities") if isinstance(section.get("capabilities"), list) else None,
            section.get("disclaims") if isinstance(section.get("disclaims"), list) else None,
        ),
    ]
    for where, keys, claims, disclaims in sources:
        claimed, disclaimed = _names(claims), _names(disclaims)
        if claimed is None and disclaimed is None:
            continue
        source = f"{where} {' and '.join(k for k, v in zip(keys, (claimed, disclaimed), strict=True) if v is not None)}"
        claimed, disclaimed = (claimed or frozenset()) & names, (disclaimed or frozenset()) & names
        both = sorted(claimed & disclaimed)
        if both:
            raise CapabilityError(
                f"the {source} both declare and disclaim {', '.join(both)}", "keep each capability in one list"
            )
        return claimed, disclaimed, source
    return frozenset(), frozenset(), "none"


def _says_false(provider: Any, attr: str) -> bool:
    """The provider has ``attr`` and it is False (a provider without it says nothing)."""
    try:
        return getattr(provider, attr) is False
    except Exception:
        return False


def _flag(provider: Any, attr: str) -> bool:
    try:
        return getattr(provider, attr) is True
    except Exception:
        return False


# The provider-configuration extension: a provider taking part overrides one of these.
CONFIG_METHODS = ("get_config_schema", "resolve_config", "probe_with_config")


def _overrides_config_schema(provider: Any) -> bool:
    from conformance.host.registry import provider_base_class

    base_class = provider_base_class()
    for name in CONFIG_METHODS:
        try:
            mine = getattr(provider, name)
        except Exception:
            continue
        base = getattr(base_class, name, None)
        if getattr(mine, "__func__", mine) is not base and callable(mine):
            return True  # its own method, over the host's or where the host has none
    return False


def _takes_workspace_binding(provider: Any) -> bool:
    """create_environment names workspace_binding (as the host's documented provider does)."""
    try:
        return "workspace_binding" in inspect.signature(provider.create_environment).parameters
    except (TypeError, ValueError, AttributeError):
        return False


def backend_kind(provider: Any) -> str:
    """The kind the provider declares (conformance_backend_kind), "sandbox" when it declares none."""
    return decide_kind(provider, None, None)[0]


def decide_kind(provider: Any, manifest: Any, config_kind: str | None) -> tuple[str, str]:
    """(kind, who says so): --backend-config's ``kind``, plugin.yaml's ``conformance.kind``, the provider's
    conformance_backend_kind, else what the backend shows: a local backend that is not a container runs
    its commands on this machine (Hermes's own local backend); anything else is a sandbox."""
    section = (manifest or {}).get("conformance") if isinstance(manifest, dict) else None
    section = section if isinstance(section, dict) else {}
    said = [
        ("backend-config", config_kind),
        ("plugin.yaml", section.get("kind")),
        ("provider attribute", _attr(provider, KIND_ATTR)),
    ]
    for where, kind in said:
        if kind is None:
            continue
        if kind not in BACKEND_KINDS:
            raise CapabilityError(
                f"the {where} kind is {kind!r}, not a backend kind the contract knows",
                f"set it to one of {', '.join(repr(k) for k in BACKEND_KINDS)}, or leave it out",
            )
        return str(kind), where
    if _says_false(provider, "is_remote") and _says_false(provider, "is_container"):
        return "host-attached", "inferred: a local backend that is not a container runs commands on this machine"
    return "sandbox", "default"


def resolve(
    contract: Contract,
    *,
    provider: Any,
    loaded: Any,
    config_caps: list[str] | None,
    world: Any,
    config_disclaims: list[str] | None = None,
    config_kind: str | None = None,
) -> Capabilities:
    declared, disclaimed, source = _declared(
        contract, provider, getattr(loaded, "manifest", None), config_caps, config_disclaims
    )
    open_names: Iterable[str] = declarable(contract) - declared - disclaimed
    undeclared = {n: tuple(found) for n, found in signs.find(provider, loaded, open_names).items()}
    present = set(declared) | {n for n, found in undeclared.items() if found}
    if _flag(provider, "is_remote"):
        present.add("remote")
    if _flag(provider, "session_isolated_when_nonpersistent"):
        present.add("session-isolation")
    kind, kind_source = decide_kind(provider, getattr(loaded, "manifest", None), config_kind)
    if kind == "sandbox":
        present.add("per-task-sandbox")
    if _overrides_config_schema(provider):
        present.add("config-schema")
    if _takes_workspace_binding(provider):
        present.add("workspace-binding")
    if getattr(loaded, "is_package", False):
        present.add("plugin-package")
    if getattr(loaded, "entry_point", None):
        present.add("distribution")
    if world is not None:
        present |= set(getattr(world, "capabilities", ()))
    if callable(_attr(provider, DELETE_HOOK)) or "world-states" in present:
        present.add("sandbox-delete")
    unknown = present - set(contract.capabilities)
    return Capabilities(frozenset(present - unknown), source, declared, disclaimed, undeclared, kind, kind_source)
