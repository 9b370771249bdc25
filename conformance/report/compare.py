"""Compare two reports' verdicts clause by clause.

Between two reports of the same contract version (host equivalence), a
difference is allowed only where one side is "not-applicable" because of its
host (the host lacks a feature the clause needs); any other difference means
the kit's stand-in host behaves unlike the real one.

Between reports made under different contract versions, every clause the
newer contract added, changed or removed is listed with both verdicts as a
"contract-change" (conformance/contract_history.py says what moved); only the
clauses both versions hold alike can be a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance import contract_history
from conformance.report import files


@dataclass(frozen=True)
class Difference:
    clause: str
    first: str
    second: str
    kind: str  # "host-not-applicable" | "contract-change" | "mismatch"
    detail: str = ""


def _host_na(entry: dict[str, Any]) -> bool:
    return entry["verdict"] == "not-applicable" and entry.get("reason", "").startswith("not-applicable (host")


def _version(report: dict[str, Any]) -> str:
    return contract_history.canonical(report["contract"]["version"])


def compare(first: dict[str, Any], second: dict[str, Any]) -> list[Difference]:
    a = {c["id"]: c for c in first["clauses"]}
    b = {c["id"]: c for c in second["clauses"]}
    moved = contract_history.between(_version(first), _version(second))
    out = []
    for cid in sorted(set(a) | set(b)):
        x, y = a.get(cid), b.get(cid)
        if cid in moved:
            change = moved[cid]
            fields = f": {', '.join(change.fields)}" if change.fields else ""
            out.append(
                Difference(
                    cid,
                    x["verdict"] if x else "absent",
                    y["verdict"] if y else "absent",
                    "contract-change",
                    f"{change.kind} in {_version(second)}{fields}",
                )
            )
            continue
        if x is None or y is None:
            out.append(
                Difference(
                    cid,
                    x["verdict"] if x else "absent",
                    y["verdict"] if y else "absent",
                    "mismatch",
                    "clause missing from one report",
                )
            )
            continue
        if x["verdict"] == y["verdict"]:
            continue
        kind = "host-not-applicable" if _host_na(x) or _host_na(y) else "mismatch"
        detail = (x.get("reason") or y.get("reason") or "")[:300]
        out.append(Difference(cid, x["verdict"], y["verdict"], kind, detail))
    return out


def load(path: str | Path) -> dict[str, Any]:
    """A report.json read for comparison; ReportFileError naming the file, what is wrong with it and the fix."""
    return files.read_report(path)


def describe(differences: list[Difference], *, versions: tuple[str, str] | None = None) -> list[str]:
    mismatches = [d for d in differences if d.kind == "mismatch"]
    moved = [d for d in differences if d.kind == "contract-change"]
    lines = []
    if versions and versions[0] != versions[1]:
        lines.append(
            f"contract {versions[0]} -> {versions[1]}: {len(moved)} clause(s) added, changed, removed "
            "or reworded (see docs/contract/CHANGELOG.md)"
        )
    lines += [f"{d.clause}: {d.first} vs {d.second} ({d.kind}) {d.detail}".rstrip() for d in differences]
    host = len(differences) - len(mismatches) - len(moved)
    lines.append(
        f"{len(mismatches)} mismatch(es), {host} host-caused difference(s)"
        + (f", {len(moved)} contract change(s)" if moved else "")
        + ("" if mismatches else ": verdicts are equivalent")
    )
    return lines


def versions_of(first: dict[str, Any], second: dict[str, Any]) -> tuple[str, str]:
    return _version(first), _version(second)
