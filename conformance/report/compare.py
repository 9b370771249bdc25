"""Compare two reports' verdicts clause by clause (host equivalence).

A difference is allowed only where one side is "not-applicable" because of
its host (the host lacks a feature the clause needs); any other difference
means the kit's stand-in host behaves unlike the real one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Difference:
    clause: str
    first: str
    second: str
    kind: str  # "host-not-applicable" | "mismatch"
    detail: str = ""


def _host_na(entry: dict[str, Any]) -> bool:
    return entry["verdict"] == "not-applicable" and entry.get("reason", "").startswith("not-applicable (host")


def compare(first: dict[str, Any], second: dict[str, Any]) -> list[Difference]:
    a = {c["id"]: c for c in first["clauses"]}
    b = {c["id"]: c for c in second["clauses"]}
    out = []
    for cid in sorted(set(a) | set(b)):
        x, y = a.get(cid), b.get(cid)
        if x is None or y is None:
            out.append(Difference(cid, x["verdict"] if x else "absent", y["verdict"] if y else "absent",
                                  "mismatch", "clause missing from one report"))
            continue
        if x["verdict"] == y["verdict"]:
            continue
        kind = "host-not-applicable" if _host_na(x) or _host_na(y) else "mismatch"
        detail = (x.get("reason") or y.get("reason") or "")[:300]
        out.append(Difference(cid, x["verdict"], y["verdict"], kind, detail))
    return out


def compare_files(first: str | Path, second: str | Path) -> list[Difference]:
    return compare(json.loads(Path(first).read_text()), json.loads(Path(second).read_text()))


def describe(differences: list[Difference]) -> list[str]:
    mismatches = [d for d in differences if d.kind == "mismatch"]
    lines = [f"{d.clause}: {d.first} vs {d.second} ({d.kind}) {d.detail}".rstrip() for d in differences]
    lines.append(
        f"{len(mismatches)} mismatch(es), {len(differences) - len(mismatches)} host-caused difference(s)"
        + ("" if mismatches else ": verdicts are equivalent")
    )
    return lines
