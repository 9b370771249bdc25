"""Cold start of every contender, interleaved sample by sample in one process.

A cold start is the time from nothing to the first command's result: for a
backend, ``create_environment()`` through the host's factory and the first
``execute("true")``; for a vendor's minimal client (minimal.py), its fewest
protocol calls; for local bash, a fresh directory and the first ``bash -c
true`` in it.  Releasing what was made is not part of the figure.

The machine this runs on is shared, so its load changes during a run.  Each
round therefore takes one sample of every contender, in an order rotated
round by round, and ratios are taken between medians of the same rounds:
load from elsewhere falls on both sides of a ratio alike.  One unmeasured
round comes first, so no figure carries the process's first imports of an
SDK or of the host.

Several kit runs live at once here (each with its fake and its HERMES_HOME),
and a run exports its variables into ``os.environ``; a ``Scope`` (scope.py)
holds what one run set up, and is applied before each of that contender's samples.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from conformance.bench.minimal import ColdSample
from conformance.scope import Scope, restored


@dataclass
class Contender:
    name: str
    start: Callable[[], ColdSample]
    scope: Scope | None = None
    samples: list[ColdSample] = field(default_factory=list)
    error: str | None = None

    def sample(self) -> None:
        if self.scope is not None:
            self.scope.apply()
        self.samples.append(self.start())

    @property
    def result_ms(self) -> float | None:
        """Median time to the first result, in ms (None without samples)."""
        return statistics.median(s.result_s for s in self.samples) * 1000 if self.samples else None

    @property
    def created_ms(self) -> float | None:
        return statistics.median(s.created_s for s in self.samples) * 1000 if self.samples else None

    def detail(self) -> dict[str, object]:
        return {
            "interleaved": True,
            "samples_ms": [round(s.result_s * 1000, 2) for s in self.samples],
            "created_ms": None if self.created_ms is None else round(self.created_ms, 2),
        }


def interleave(contenders: list[Contender], rounds: int, progress: Callable[[str, str, str], None]) -> None:
    """One warm-up round, then ``rounds`` rounds of one sample each, in rotating order.

    A contender that fails keeps its error and takes no further samples; the others go on.
    """
    with restored():
        for index in range(rounds + 1):
            shift = index % max(1, len(contenders))
            for contender in contenders[shift:] + contenders[:shift]:
                if contender.error is not None:
                    continue
                try:
                    contender.sample()
                except Exception as exc:
                    contender.error = f"{type(exc).__name__}: {str(exc)[:300]}"
                    progress(contender.name, "cold start", f"failed: {contender.error}")
            if index == 0:
                for contender in contenders:  # the warm-up round is not measured
                    contender.samples.clear()
    for contender in contenders:
        if contender.result_ms is not None:
            progress(
                contender.name,
                "cold start",
                f"{contender.result_ms:.1f} ms to the first result "
                f"(created in {contender.created_ms:.1f} ms; median of {len(contender.samples)}, interleaved)",
            )
