"""The contract's released versions and what changed between them.

Every released contract is kept verbatim under ``conformance/contracts/<version>.yaml``;
the bundled contract.yaml is the newest.  A clause's normative fields are what a
backend is held to: its level, statement, capability, provider, host feature and
whether it is a proposal.  A change to any of them between two versions is a
*change*; a change only to its title, source, fix or policy is a *revision* (same
obligation, better words).

``docs/contract/CHANGELOG.md`` is generated from this module (with the rest of
docs/contract), and ``report compare`` uses it to explain why two reports made under
different contract versions differ.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from conformance import contract

NORMATIVE = ("level", "statement", "capability", "provided_by", "host_feature", "proposal")
WORDING = ("title", "source", "fix", "policy")


@dataclass(frozen=True)
class Change:
    clause: str
    kind: str  # "added" | "removed" | "changed" | "revised"
    fields: tuple[str, ...] = ()
    level: str = ""
    title: str = ""

    def line(self) -> str:
        what = f" ({', '.join(self.fields)})" if self.fields else ""
        return f"`{self.clause}` {self.level} — {self.title}{what}"


def canonical(version: str | int) -> str:
    """ "1.0" for the integer 1 that reports of contract 1.0 recorded; other versions as given."""
    text = str(version)
    return text if "." in text else f"{text}.0"


@cache
def _stored() -> dict[str, tuple[dict[str, Any], ...]]:
    out: dict[str, tuple[dict[str, Any], ...]] = {}
    folder = resources.files("conformance").joinpath("contracts")
    for entry in sorted(folder.iterdir(), key=lambda e: contract.version_key(e.name.removesuffix(".yaml"))):
        if entry.name.endswith(".yaml"):
            data = yaml.safe_load(entry.read_text("utf-8"))
            out[canonical(data["version"])] = tuple(data["clauses"])
    return out


@cache
def _stored_capabilities() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    folder = resources.files("conformance").joinpath("contracts")
    for entry in folder.iterdir():
        if entry.name.endswith(".yaml"):
            data = yaml.safe_load(entry.read_text("utf-8"))
            out[canonical(data["version"])] = dict(data.get("capabilities") or {})
    return out


def new_capabilities(current: contract.Contract | None = None) -> dict[str, dict[str, Any]]:
    """{version: {capability: its definition}} of the capabilities each released version added."""
    current = current or contract.load()
    versions = list(released(current))
    defined = {**_stored_capabilities(), canonical(current.version): dict(current.capabilities)}
    return {
        new: {n: c for n, c in defined.get(new, {}).items() if n not in defined.get(old, {})}
        for old, new in itertools.pairwise(versions)
    }


def released(current: contract.Contract | None = None) -> dict[str, tuple[dict[str, Any], ...]]:
    """{version: clauses as parsed dicts}, oldest first, ``current`` (default: the bundled contract) last."""
    current = current or contract.load()
    return {**_stored(), canonical(current.version): tuple(c.to_dict() for c in current)}


def _norm(clause: dict[str, Any], name: str) -> Any:
    value = clause.get(name)
    if name == "capability":
        return sorted([value] if isinstance(value, str) else value or [])
    if isinstance(value, str):
        return " ".join(value.split())
    return value


def changes(old: tuple[dict[str, Any], ...], new: tuple[dict[str, Any], ...]) -> list[Change]:
    """Clause by clause, in the new contract's order (removed clauses last)."""
    before = {c["id"]: c for c in old}
    after = {c["id"]: c for c in new}
    out: list[Change] = []
    for cid, clause in after.items():
        prior = before.get(cid)
        if prior is None:
            out.append(Change(cid, "added", level=clause["level"], title=clause["title"]))
            continue
        normative = tuple(f for f in NORMATIVE if _norm(prior, f) != _norm(clause, f))
        wording = tuple(f for f in WORDING if _norm(prior, f) != _norm(clause, f))
        if normative:
            fields = tuple(f"level {prior['level']} → {clause['level']}" if f == "level" else f for f in normative)
            out.append(Change(cid, "changed", fields, clause["level"], clause["title"]))
        elif wording:
            out.append(Change(cid, "revised", wording, clause["level"], clause["title"]))
    for cid, clause in before.items():
        if cid not in after:
            out.append(Change(cid, "removed", level=clause["level"], title=clause["title"]))
    return out


def between(first: str | int, second: str | int) -> dict[str, Change]:
    """{clause id: change} from one released version to another; {} when either is unknown."""
    versions = released()
    a, b = canonical(first), canonical(second)
    if a == b or a not in versions or b not in versions:
        return {}
    return {c.clause: c for c in changes(versions[a], versions[b])}


HEADINGS = {"added": "Added", "changed": "Changed", "removed": "Removed", "revised": "Reworded"}
MEANING = {
    "added": (
        "new obligations; a backend certified under the previous version is checked against them for the first time"
    ),
    "changed": "the obligation itself moved (level, statement, capability, provider, host feature or proposal)",
    "removed": "no longer part of the contract",
    "revised": "same obligation; the title, source, fix or kit-policy note was corrected",
}


def changelog(current: contract.Contract | None = None) -> str:
    """docs/contract/CHANGELOG.md: every released version, newest first."""
    versions = list(released(current).items())
    added_capabilities = new_capabilities(current)
    lines = [
        "# Contract changelog\n",
        "What each contract version added, changed and removed, clause by clause, generated from the "
        "released contracts kept in `conformance/contracts/` and the bundled `contract.yaml`. A report "
        "records the version it was made under; `hermes-backend-kit report compare OLD NEW` shows these "
        "changes next to the verdicts.\n",
    ]
    for i in range(len(versions) - 1, 0, -1):
        (old_v, old), (new_v, new) = versions[i - 1], versions[i]
        found = changes(old, new)
        musts = sum(1 for c in new if c["level"] == "MUST")
        lines.append(f"## {new_v}\n")
        lines.append(f"{len(new)} clauses ({musts} MUST), against {len(old)} in {old_v}.\n")
        for kind in ("added", "changed", "removed", "revised"):
            picked = [c for c in found if c.kind == kind]
            if not picked:
                continue
            lines.append(f"### {HEADINGS[kind]} ({len(picked)})\n")
            lines.append(f"{MEANING[kind][0].upper()}{MEANING[kind][1:]}.\n")
            lines += [f"- {c.line()}" for c in picked]
            lines.append("")
        capabilities = added_capabilities.get(new_v) or {}
        if capabilities:
            lines.append(f"### New capabilities ({len(capabilities)})\n")
            lines.append("Clauses that need one are not applicable to a backend without it.\n")
            lines += [
                f"- `{name}` ({c['determined_by']}) — {' '.join(c['description'].split())}"
                for name, c in capabilities.items()
            ]
            lines.append("")
    first_v, first = versions[0]
    lines.append(f"## {first_v}\n")
    lines.append(
        f"The first released contract: {len(first)} clauses ({sum(1 for c in first if c['level'] == 'MUST')} MUST).\n"
    )
    return "\n".join(lines)
