"""Load and validate contract.yaml; look clauses up by id.

The contract is data reviewed like code: a JSON Schema fixes its shape, and
the loader adds the checks a schema cannot express (unique ids, references to
declared capabilities and host features).  Every error names the offending
field by its path, e.g. ``clauses[12].level``, so a bad edit is found at once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from conformance.errors import ContractError, ContractFileError, file_problem, yaml_problem

GROUPS = (
    "provider",
    "register",
    "lifecycle",
    "persist",
    "exec",
    "cwd",
    "stdin",
    "timeout",
    "output",
    "env",
    "files",
    "sync",
    "background",
    "errors",
    "probe",
    "identity",
    "faults",
)
LEVELS = ("MUST", "SHOULD", "MAY")


@dataclass(frozen=True)
class Clause:
    id: str
    level: str
    provided_by: str
    title: str
    statement: str
    source: str
    capabilities: tuple[str, ...] = ()
    host_feature: str | None = None
    fix: str | None = None
    # The contract version that made the clause required, and, for a clause whose
    # level rests on the kit's own judgement rather than Hermes code, why.
    since: str = "1.0"
    policy: str | None = None
    # Where the obligation comes from when no Hermes release has the code yet (an open pull request,
    # a docs page ahead of the code): such a clause is SHOULD at most and needs its host feature.
    proposal: str | None = None

    @property
    def group(self) -> str:
        return self.id.split(".", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "level": self.level,
            "since": self.since,
            "provided_by": self.provided_by,
            "title": self.title,
            "statement": self.statement,
            "source": self.source,
        }
        if self.capabilities:
            out["capability"] = list(self.capabilities)
        if self.host_feature:
            out["host_feature"] = self.host_feature
        if self.fix:
            out["fix"] = self.fix
        if self.policy:
            out["policy"] = self.policy
        if self.proposal:
            out["proposal"] = self.proposal
        return out


@dataclass(frozen=True)
class Contract:
    version: str
    title: str
    clauses: tuple[Clause, ...]
    capabilities: dict[str, dict[str, str]]
    host_features: dict[str, str]
    sha256: str
    path: str
    # Certification profiles in order of preference (strongest first); each has
    # "harness" (the harness capabilities whose clauses it covers) and "description".
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    # The first Hermes release the contract describes, as a plugin.yaml floor (">=0.21.3");
    # None for contracts that predate the field.
    requires_hermes: str | None = None
    _by_id: dict[str, Clause] = field(default_factory=dict, repr=False, compare=False)

    def __iter__(self) -> Iterator[Clause]:
        return iter(self.clauses)

    def __len__(self) -> int:
        return len(self.clauses)

    def __contains__(self, clause_id: object) -> bool:
        return clause_id in self._by_id

    def get(self, clause_id: str) -> Clause:
        try:
            return self._by_id[clause_id]
        except KeyError:
            raise KeyError(f"unknown clause {clause_id!r}; run `hermes-backend-kit contract list`") from None

    def groups(self) -> dict[str, list[Clause]]:
        out: dict[str, list[Clause]] = {}
        for clause in self.clauses:
            out.setdefault(clause.group, []).append(clause)
        return out


def version_key(version: str | int) -> tuple[int, ...]:
    """Sortable form of a contract version ("2.0" -> (2, 0); v1 reports recorded the integer 1)."""
    return tuple(int(part) for part in str(version).split("."))


def _schema() -> dict[str, Any]:
    text = resources.files("conformance").joinpath("contract.schema.json").read_text("utf-8")
    return json.loads(text)


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def validate(data: Any, *, origin: str = "contract.yaml") -> None:
    """Raise ContractError naming every problem in ``data`` (the parsed YAML)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(_schema())
    problems = []
    for err in sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path)):
        problems.append(f"{_path(err.absolute_path)}: {err.message}")
    if not problems:
        problems = _semantic_problems(data)
    if problems:
        raise ContractError(
            f"{origin} is not a valid contract ({len(problems)} problem(s))",
            "fix the named fields; the shape is in conformance/contract.schema.json",
            why="; ".join(problems),
        )


def _semantic_problems(data: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    seen: dict[str, int] = {}
    caps = set(data["capabilities"])
    features = set(data["host_features"])
    harness = {n for n, c in data["capabilities"].items() if c["determined_by"] == "harness"}
    for name, cap in data["capabilities"].items():
        only_for = cap.get("only_for")
        if only_for is not None and (only_for not in caps or only_for in harness):
            problems.append(
                f"capabilities.{name}.only_for: {only_for!r} is not a declared or provider "
                f"capability (known: {', '.join(sorted(caps - harness))})"
            )
    for name, profile in data["profiles"].items():
        for cap in profile["harness"]:
            if cap not in harness:
                problems.append(
                    f"profiles.{name}.harness: {cap!r} is not a harness capability "
                    f"(known: {', '.join(sorted(harness))})"
                )
    for i, clause in enumerate(data["clauses"]):
        cid = clause["id"]
        if version_key(clause["since"]) > version_key(data["version"]):
            problems.append(
                f"clauses[{i}].since: {clause['since']!r} is later than the contract's version {data['version']!r}"
            )
        if cid in seen:
            problems.append(f"clauses[{i}].id: {cid!r} repeats clauses[{seen[cid]}].id")
        seen.setdefault(cid, i)
        wanted = clause.get("capability", [])
        for cap in [wanted] if isinstance(wanted, str) else wanted:
            if cap not in caps:
                problems.append(
                    f"clauses[{i}].capability: {cap!r} is not declared under capabilities "
                    f"(known: {', '.join(sorted(caps))})"
                )
        feature = clause.get("host_feature")
        if clause.get("proposal") and (clause["level"] == "MUST" or feature is None):
            problems.append(
                f"clauses[{i}]: {cid!r} is a proposal (no Hermes release has its code), so it is SHOULD or MAY "
                "and names the host_feature a host must have for it to run"
            )
        if feature is not None and feature not in features:
            problems.append(
                f"clauses[{i}].host_feature: {feature!r} is not declared under host_features "
                f"(known: {', '.join(sorted(features))})"
            )
    return problems


# Every process of a run loads the contract: libyaml's safe loader, where PyYAML has it, reads it about
# ten times faster than the pure-Python one, into the same data.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse(text: str | bytes, *, origin: str = "contract.yaml") -> Contract:
    raw = text.encode("utf-8") if isinstance(text, str) else text
    try:
        data = yaml.load(raw, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise ContractError(
            f"{origin} is not valid YAML ({yaml_problem(exc)})",
            "fix the YAML; the shape is in conformance/contract.schema.json",
        ) from None
    validate(data, origin=origin)
    clauses = []
    for item in data["clauses"]:
        cap = item.get("capability", ())
        clauses.append(
            Clause(
                id=item["id"],
                level=item["level"],
                provided_by=item["provided_by"],
                title=item["title"],
                statement=" ".join(item["statement"].split()),
                source=item["source"],
                capabilities=(cap,) if isinstance(cap, str) else tuple(cap),
                host_feature=item.get("host_feature"),
                fix=item.get("fix"),
                since=item["since"],
                policy=item.get("policy"),
                proposal=" ".join(item["proposal"].split()) if item.get("proposal") else None,
            )
        )
    contract = Contract(
        version=data["version"],
        title=data["title"],
        clauses=tuple(clauses),
        capabilities=data["capabilities"],
        host_features=data["host_features"],
        sha256=hashlib.sha256(raw).hexdigest(),
        path=origin,
        profiles=data["profiles"],
        requires_hermes=data.get("requires_hermes"),
    )
    contract._by_id.update({c.id: c for c in clauses})
    return contract


def load(path: str | Path | None = None) -> Contract:
    """Load a contract file; without a path, the one shipped with the kit (cached)."""
    if path is None:
        return _bundled()
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ContractFileError(f"cannot read contract {p} ({file_problem(exc)})") from None
    return parse(raw, origin=str(p))


@cache
def _bundled() -> Contract:
    ref = resources.files("conformance").joinpath("contract.yaml")
    return parse(ref.read_bytes(), origin="conformance/contract.yaml")
