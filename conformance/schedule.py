"""The order checks run in: the longest first, each worker taking the next when it is free.

A certify's wall time is set by its slowest worker.  Most checks take tens of
milliseconds, but some wait for what they check (a silent service, a
timeout, a rate limit's back-off) for seconds, and pytest-xdist's default
scheduling hands each worker a block of neighbouring checks: the waiting
checks of one module land on one worker, one after another, while the other
worker runs out of work.  Here the checks are ordered by what they are
expected to take, longest first, and handed out one at a time (longest
processing time first), so the long waits overlap each other and the short
checks fill the gaps.  Only a distributed run is reordered: each xdist worker sorts the
same collection the same way, and a run without workers keeps the collection's order.

Expected costs are measured, not guessed: ``costs.json`` beside this module
holds each check's wall time, the largest over the reference backends'
certify runs (``--check-costs``), written by ``python -m
conformance.schedule COSTS.jsonl ...``.  A check the table does not know
(new, or a parameter it has not seen) counts as the table's median.  The
order changes when checks run, never what they check: every check still
runs once, with its own environments.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

COSTS = Path(__file__).with_name("costs.json")


def check_name(nodeid: str) -> str:
    """``test_file.py::test_name[param]`` from any node id of a check (``conformance/checks/...``)."""
    path, sep, rest = nodeid.partition("::")
    return path.rsplit("/", 1)[-1] + sep + rest


@cache
def expected() -> dict[str, float]:
    """Each known check's expected wall seconds (empty when the table is missing or unreadable)."""
    try:
        data = json.loads(COSTS.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    table = data.get("wall_s") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        return {}
    return {str(k): float(v) for k, v in table.items() if isinstance(v, (int, float))}


def longest_first(nodeids: Sequence[str]) -> list[int]:
    """The positions of ``nodeids`` in the order to run them: expected cost descending, ties in collection
    order (so every xdist worker, sorting the same collection, gets the same order)."""
    table = expected()
    default = statistics.median(table.values()) if table else 0.0
    costs = [table.get(check_name(n), default) for n in nodeids]
    return sorted(range(len(nodeids)), key=lambda i: (-costs[i], i))


def make_scheduler(config: Any, log: Any) -> Any:
    """A pytest-xdist scheduler handing out the collection one check at a time, in its order."""
    from xdist.scheduler import LoadScheduling  # type: ignore[import-untyped]

    class LongestFirst(LoadScheduling):
        """xdist's load scheduling with single-check chunks from the start.

        A worker runs a check once it holds the next one too (pytest tears a
        check down knowing its successor), so each starts with two: checks 1
        and N+1 to the first of N workers, 2 and N+2 to the second, and so on;
        afterwards each finished check brings its worker the next pending one.
        """

        collection: list[str] | None

        def __init__(self, config: Any, log: Any = None) -> None:
            super().__init__(config, log)
            self.maxschedchunk = 1

        def schedule(self) -> None:
            if self.collection is not None or not self.collection_is_completed:
                super().schedule()
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            collection: list[str] = next(iter(self.node2collection.values()))
            self.collection = collection
            self.pending[:] = range(len(collection))
            for _ in range(2):
                for node in self.nodes:
                    if self.pending:
                        self._send_tests(node, 1)
            if not self.pending:
                for node in self.nodes:
                    node.shutdown()

    return LongestFirst(config, log)


def measured(paths: Sequence[Path]) -> dict[str, float]:
    """Each check's largest wall time over the ``--check-costs`` files ``paths``."""
    table: dict[str, float] = {}
    for path in paths:
        for line in path.read_text("utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                name = check_name(row["check"])
                table[name] = max(table.get(name, 0.0), float(row["wall_s"]))
    return table


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.schedule",
        description="Write conformance/costs.json, the checks' expected wall times, from --check-costs files "
        "of certify runs (one per reference backend, on a quiet machine).",
    )
    parser.add_argument("costs", nargs="+", type=Path, help="JSON lines written by certify --check-costs")
    args = parser.parse_args(argv)
    table = measured(args.costs)
    data = {
        "about": "each check's largest wall time (s) over the certify runs it was measured from; "
        "regenerate with python -m conformance.schedule",
        "runs": len(args.costs),
        "wall_s": {k: round(v, 2) for k, v in sorted(table.items())},
    }
    COSTS.write_text(json.dumps(data, indent=1) + "\n", "utf-8")
    print(f"wrote {COSTS} ({len(table)} checks from {len(args.costs)} runs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
