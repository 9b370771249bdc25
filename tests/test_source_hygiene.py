"""The project's sources say what the code does: no pointers to the project's own issue tracker.

Hermes's issues are sources and stay citable ("Hermes issue 8340"); a bare "issue 7" or
"issue 7, section 4" points into this project's tracker and rots as issues close.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("conformance", "fakes", "reference", "isolation", "archives", "tests", "docs")
SUFFIXES = {".py", ".md", ".ts", ".yaml", ".toml"}
# "issue 7" not preceded by "Hermes " and not part of a list of Hermes issue numbers (5+ digits).
PROJECT_ISSUE = re.compile(r"(?<!Hermes )\bissues? #?\d{1,3}\b(?!\d)", re.IGNORECASE)


def _sources() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "noxfile.py"]
    for package in PACKAGES:
        files += [
            p
            for p in (ROOT / package).rglob("*")
            if p.suffix in SUFFIXES and "node_modules" not in p.parts and p.is_file()
        ]
    return files


def test_no_project_issue_numbers_in_sources():
    found = []
    for path in _sources():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if PROJECT_ISSUE.search(line) and path.name != Path(__file__).name:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "say what the code does instead of citing the project's issues:\n" + "\n".join(found)
