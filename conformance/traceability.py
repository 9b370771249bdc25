"""Map checks to clauses and back, by collecting the check suite without running it."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass

import pytest

from conformance.contract import Contract


class Checks(dict[str, tuple[str, ...]]):
    """Check node id -> the clause ids it cites; ``black_box``: node id -> the harness
    capabilities each black-box check needs itself."""

    black_box: dict[str, tuple[str, ...]]

    def __init__(self) -> None:
        super().__init__()
        self.black_box = {}


def clause_ids(item: pytest.Item) -> tuple[str, ...]:
    """The clause ids a check cites (its ``clause`` marks), each once, in order."""
    ids: list[str] = []
    for mark in item.iter_markers("clause"):
        ids.extend(str(a) for a in mark.args)
    return tuple(dict.fromkeys(ids))


def black_box_needs(item: pytest.Item) -> tuple[str, ...] | None:
    """The harness capabilities a black-box check needs itself; None for a check that is not black-box."""
    mark = item.get_closest_marker("black_box")
    return None if mark is None else tuple(str(a) for a in mark.args)


class _Collector:
    def __init__(self) -> None:
        self.checks = Checks()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            self.checks[item.nodeid] = clause_ids(item)
            needs = black_box_needs(item)
            if needs is not None:
                self.checks.black_box[item.nodeid] = needs


@dataclass
class Coverage:
    checks: dict[str, tuple[str, ...]]  # check node id -> clause ids
    by_clause: dict[str, list[str]]  # clause id -> check node ids
    uncited_checks: list[str]  # checks citing no clause

    @property
    def covered(self) -> list[str]:
        return [c for c, checks in self.by_clause.items() if checks]

    @property
    def uncovered(self) -> list[str]:
        return [c for c, checks in self.by_clause.items() if not checks]

    @property
    def percent(self) -> float:
        return 100.0 * len(self.covered) / len(self.by_clause) if self.by_clause else 0.0


def collect(package: str = "conformance.checks") -> Checks:
    """Collect the checks in ``package``; raises if a check cites an unknown clause."""
    collector = _Collector()
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = pytest.main(
            ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "--pyargs", package],
            plugins=[collector],
        )
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        raise RuntimeError(f"collecting {package} failed (exit {int(code)}):\n{sink.getvalue()[-3000:]}")
    return collector.checks


def coverage(contract: Contract, checks: dict[str, tuple[str, ...]] | None = None) -> Coverage:
    checks = collect() if checks is None else checks
    by_clause: dict[str, list[str]] = {c.id: [] for c in contract}
    for nodeid, ids in checks.items():
        for cid in ids:
            by_clause.setdefault(cid, []).append(nodeid)
    uncited = sorted(n for n, ids in checks.items() if not ids)
    return Coverage(checks, by_clause, uncited)
