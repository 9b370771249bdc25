"""Reading a report.json named on the command line: one error naming the file, the problem and the fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.errors import ReportFileError, file_problem


def read_json(path: str | Path) -> Any:
    """The parsed JSON of ``path``; ReportFileError when it is missing, not UTF-8 text or not JSON."""
    try:
        text = Path(path).read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportFileError(f"cannot read report {path} ({file_problem(exc)})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportFileError(
            f"cannot read report {path} (not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None


def read_report(path: str | Path, *, versioned: bool = True) -> dict[str, Any]:
    """A certification report read from ``path``; ReportFileError when it cannot be read or is not one.

    ``versioned``: it must also name its contract version (what a comparison across versions needs).
    """
    report = read_json(path)
    if not isinstance(report, dict) or not isinstance(report.get("clauses"), list):
        raise ReportFileError(f"{path}: not a certification report (no clauses)")
    if versioned and (not isinstance(report.get("contract"), dict) or "version" not in report["contract"]):
        raise ReportFileError(f"{path}: not a certification report (no contract version)")
    return report
