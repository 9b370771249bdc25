"""The check manifest shipped with each kit version, and what "complete" means.

``conformance/checks.manifest.json`` lists every check of this kit version,
the clauses each cites, which checks are black-box (and the harness
capabilities each of those needs), and the SHA-256 of each check file.  A run is complete when every listed
check produced an outcome and the check files on disk hash as listed: a run
narrowed with -k, -m or --deselect, or with check files removed or edited,
is not complete, and so not certified.

    python -m conformance.manifest          # regenerate after changing checks
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

MANIFEST = "checks.manifest.json"


def check_key(nodeid: str) -> str:
    """``test_exec.py::test_x[3]`` for a check's node id from any rootdir."""
    path, sep, name = nodeid.partition("::")
    return f"{Path(path).name}{sep}{name}"


def check_files() -> dict[str, str]:
    """{file name: sha256} of the installed check modules."""
    root = resources.files("conformance").joinpath("checks")
    out = {}
    for item in sorted(root.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".py"):
            out[item.name] = hashlib.sha256(item.read_bytes()).hexdigest()
    return out


def files_digest(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def generate(checks: Mapping[str, Iterable[str]]) -> dict[str, Any]:
    """The manifest for ``checks`` ({check node id: the clause ids it cites}; its ``black_box``
    attribute, when it has one: {check node id: the harness capabilities a black-box check needs})."""
    files = check_files()
    cites = {check_key(c): sorted(ids) for c, ids in checks.items()}
    black_box = {check_key(c): sorted(needs) for c, needs in getattr(checks, "black_box", {}).items()}
    return {
        "checks_sha256": files_digest(files),
        "files": files,
        "checks": sorted(cites),
        "cites": cites,
        "black_box": black_box,
    }


@cache
def shipped() -> dict[str, Any]:
    return json.loads(resources.files("conformance").joinpath(MANIFEST).read_text("utf-8"))


def completeness(ran: Iterable[str]) -> tuple[bool, list[str]]:
    """(complete, reasons it is not) for the node ids that produced an outcome."""
    manifest = shipped()
    reasons = []
    files = check_files()
    if files != manifest["files"]:
        changed = sorted(set(files.items()) ^ set(manifest["files"].items()))
        reasons.append("check files differ from this kit version: " + ", ".join(sorted({n for n, _ in changed})))
    missing = sorted(set(manifest["checks"]) - {check_key(n) for n in ran})
    if missing:
        reasons.append(f"{len(missing)} check(s) of this kit version did not run (e.g. {', '.join(missing[:3])})")
    return not reasons, reasons


def main() -> None:
    from conformance import traceability

    data = generate(traceability.collect())
    path = Path(str(resources.files("conformance").joinpath(MANIFEST)))
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{path}: {len(data['checks'])} checks in {len(data['files'])} files")


if __name__ == "__main__":
    main()
