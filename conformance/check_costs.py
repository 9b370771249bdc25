"""What each check costs: wall time, CPU seconds of the run's processes, environments created.

With ``--kit-check-costs PATH`` (``certify --check-costs PATH``; ``nox -s
bench`` asks for it) every process that runs checks appends one JSON line per
check to PATH: ``{"check", "wall_s", "cpu_s", "envs", "worker"}``.  A check's
CPU is what the run's processes used between the start of its setup and the
end of its teardown: this process (the host, the backend's client, every
thread), everything below it (the fake's process and its boxes, local
commands), and processes of the run that left that tree (Box Lite's box
daemons detach: adopted by init or by an ancestor that is a child subreaper,
they are told apart from other adoptees by the run's directory, as
``conformance.leftovers`` does).  A detached process that ends within a
check is not counted: its time went to whoever adopted it (the bench's suite
figures count it, by kind, for the run as a whole).  Each live process counts
its own time and what it reaped of its ended children, so nothing is counted
twice; a check's CPU is the growth over the check of each process in the
tree at its end (a process known by its pid and start time; one that joined
the tree during the check, such as the run's own processes found once the
run exists, counts only what it used since the check began), so a process
that ends during the check, reaped outside the tree, takes nothing away from
the others' figures, and one reaped inside it counts only what it used during
the check (its reaper's figure holds its whole life).  Under
xdist two checks run at once; each worker's tree is its own, so their
figures do not mix.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conformance import leftovers

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float, int] | None:
    """(parent pid, CPU seconds of ``pid`` and of its reaped children, start time in ticks); None when gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICK, int(fields[19])


def tree_cpu(root: int, run_dir: str | None = None) -> float:
    """CPU seconds used so far by process ``root`` and every live process below it (see ``tree_cpus``)."""
    return sum(tree_cpus(root, run_dir).values())


Key = tuple[int, int]  # a process: (pid, start time in clock ticks)


def grown(before: dict[Key, tuple[float, Key | None]], after: dict[Key, float]) -> float:
    """The CPU seconds the processes of ``after`` used since ``before`` (a process new since then: all of it).

    ``before`` also names each process's parent.  A process that ended meanwhile and whose parent is in
    ``after`` was reaped by that parent, whose figure now holds the ended process's whole life: what it
    had used before is taken off again (the fake's process, ended at the last check's teardown, would
    otherwise charge its whole run to that check).
    """
    total = sum(max(0.0, cpu - before[key][0]) if key in before else cpu for key, cpu in after.items())
    reaped_earlier = sum(cpu for key, (cpu, parent) in before.items() if key not in after and parent in after)
    return max(0.0, total - reaped_earlier)


def _processes() -> dict[int, tuple[int, float, int]]:
    stats: dict[int, tuple[int, float, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                stats[int(entry)] = found
    return stats


def all_cpus() -> dict[Key, tuple[float, Key | None]]:
    """CPU seconds used so far by every process of this machine, and its parent, by (pid, start time):
    what a check's processes had used before it, wherever they were then (a process may join the tree
    later; one that ends meanwhile is reaped by its parent, see ``grown``)."""
    stats = _processes()
    found: dict[Key, tuple[float, Key | None]] = {}
    for pid, (parent, cpu, start) in stats.items():
        above = stats.get(parent)
        found[(pid, start)] = (cpu, (parent, above[2]) if above is not None else None)
    return found


def tree_cpus(root: int, run_dir: str | None = None) -> dict[Key, float]:
    """CPU seconds used so far by process ``root`` and every live process below it, and, with ``run_dir``,
    by the processes of that run that left the tree (detached: adopted by init or by an ancestor of
    ``root``, such as a child subreaper) and everything below them; by (pid, start time)."""
    stats = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    ancestors, pid = {1}, root
    while pid in stats and pid not in ancestors:
        ancestors.add(pid)
        pid = stats[pid][0]
    frontier = [root]
    if run_dir is not None:
        adopted = (p for a in ancestors if a != root for p in children.get(a, ()) if p not in ancestors)
        frontier += [p for p in adopted if leftovers.belongs(p, run_dir)]
    seen: set[int] = set()
    while frontier:
        pid = frontier.pop()
        if pid in seen or pid not in stats:
            continue
        seen.add(pid)
        frontier.extend(children.get(pid, ()))
    return {(pid, stats[pid][2]): stats[pid][1] for pid in seen}


class CheckCosts:
    """The pytest plugin object that measures each check of this process (see the module docstring)."""

    def __init__(self, config: pytest.Config, path: str, run: Callable[[], Any]) -> None:
        """``run()``: this process's KitRun once a check has started it, else None."""
        self.path = Path(path)
        self.worker = getattr(config, "workerinput", {}).get("workerid", "main")
        self._run = run

    def _cpu(self) -> dict[Key, float]:
        run = self._run()  # its directory finds its detached processes (Box Lite's daemons)
        return tree_cpus(os.getpid(), os.path.realpath(run.workdir) if run is not None else None)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> Any:
        run = self._run()
        created = run.created if run is not None else 0
        cpu, started = all_cpus(), time.monotonic()  # every process: the run's may join the tree during the check
        yield
        wall = time.monotonic() - started
        run = self._run()
        line = {
            "check": item.nodeid,
            "wall_s": round(wall, 4),
            "cpu_s": round(grown(cpu, self._cpu()), 3),
            "envs": (run.created if run is not None else 0) - created,
            "worker": self.worker,
        }
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line) + "\n")


def read(path: str | Path) -> list[dict[str, Any]]:
    """The lines a run wrote (an empty list when it wrote none)."""
    try:
        text = Path(path).read_text("utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]
