"""``--select``: narrow a run of the checks to some clauses, for diagnosis.

``EXPR`` is either a list of clause ids and contract groups (``exec``,
``exec.exit-code,stdin``: separated by commas or spaces), which keeps every
check citing one of those clauses, or else a pytest ``-k`` expression over
the checks' names.  A narrowed run is a diagnostic run: its report records
the selection, the clauses whose checks did not run are ``not-run``, and it
is never certified (conformance.verdicts).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from conformance.contract import Contract
from conformance.errors import UsageError


@dataclass(frozen=True)
class Selection:
    expr: str
    clauses: frozenset[str] | None  # the clause ids kept; None: ``expr`` is a -k expression

    def describe(self) -> str:
        return f"--select {self.expr}"

    def keeps(self, cited: Iterable[str]) -> bool:
        return self.clauses is None or not self.clauses.isdisjoint(cited)


def parse(expr: str, contract: Contract) -> Selection:
    """The selection ``expr`` names: clause ids and groups when every word is one, else a -k expression.

    A word shaped like a clause id of a known group (``exec.exit-code``) that the contract lacks is a
    UsageError naming the closest ids: taken as a -k expression it would select nothing useful.
    """
    words = [w for w in re.split(r"[,\s]+", expr.strip()) if w]
    groups = {c.group for c in contract}
    for word in words:
        group, dot, _ = word.partition(".")
        if dot and group in groups and word not in contract and re.fullmatch(r"[a-z0-9.-]+", word):
            close = difflib.get_close_matches(word, [c.id for c in contract], n=3, cutoff=0.5)
            raise UsageError(
                f"--select names {word}, which is no clause of the contract",
                f"use a clause id{' (' + ', '.join(close) + '?)' if close else ''} or a group ({group}); "
                "`hermes-backend-kit contract list --group " + group + "` lists them",
            )
    if words and all(w in contract or w in groups for w in words):
        kept = {c.id for c in contract if c.id in words or c.group in words}
        return Selection(expr.strip(), frozenset(kept))
    return Selection(expr.strip(), None)
