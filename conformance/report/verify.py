"""Re-check a certification report offline: schema, hashes, and the certification decision."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from conformance import __version__, contract, manifest
from conformance.report.build import certification, summarize


def schema() -> dict[str, Any]:
    return json.loads(resources.files("conformance").joinpath("report.schema.json").read_text("utf-8"))


def problems(report: Any) -> list[str]:
    """Everything wrong with ``report``; empty when it verifies."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    found = [f"schema: {'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
             for e in sorted(validator.iter_errors(report), key=lambda e: list(e.absolute_path))]
    if found:
        return found
    kit_contract = contract.load()
    if report["kit"]["version"] != __version__:
        found.append(f"made by kit {report['kit']['version']}, this is {__version__}: verify with that version")
    if report["kit"]["checks_sha256"] != manifest.shipped()["checks_sha256"]:
        found.append("the checks that ran are not this kit version's checks (checks_sha256 differs)")
    if report["contract"]["sha256"] != kit_contract.sha256 or report["contract"]["version"] != kit_contract.version:
        found.append("the contract the report cites is not this kit version's contract")
    if sorted(c["id"] for c in report["clauses"]) != sorted(c.id for c in kit_contract):
        found.append("the report's clauses are not the contract's clauses")
    if summarize(report["clauses"]) != report["summary"]:
        found.append("summary does not match the clause verdicts")
    certified, because = certification(report)
    if certified != report["certified"] or because != report["not_certified_because"]:
        found.append(f"certified is {report['certified']} but the verdicts say {certified}")
    return found


def verify_file(path: str | Path) -> list[str]:
    try:
        report = json.loads(Path(path).read_text("utf-8"))
    except OSError as exc:
        return [f"cannot read {path}: {exc.strerror}"]
    except json.JSONDecodeError as exc:
        return [f"{path} is not JSON: {exc}"]
    return problems(report)
