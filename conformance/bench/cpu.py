"""CPU seconds by process while a benchmark path runs: the client apart from the fake.

The kit's process holds the host and the backend (the client side); a fake
serves from its own process, and its boxes' commands run under one small
init process per box (the box world, fakes/world.py), which forks each
command and relays its output.  ``/proc/PID/stat`` gives each process's own
CPU time and, for a parent, that of the children it has reaped, so a path's
CPU splits into:

- client: this process (every thread: backend readers, the host's drain);
- fake server: the fake's process (its HTTP/WebSocket server and event loop);
- box world: the box init processes (relaying the commands' output);
- commands: what the box init processes reaped (bash, head, tr, ...).

A group's CPU seconds per byte bound its throughput from above: a group that
needs ``c`` CPU seconds for ``n`` bytes cannot pass more than ``n / c`` bytes
a second with a whole core to itself; a process on one event loop (the fake
server) cannot use more than one core.  That is how a bench figure is traced to
the client or to the fake.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from conformance import leftovers

GROUPS = ("client", "fake server", "box world", "commands")


def _stat(pid: int) -> tuple[float, float] | None:
    """(own CPU seconds, reaped children's CPU seconds) of ``pid``; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return (utime + stime) / tick, (cutime + cstime) / tick


def _box_inits(fake_pid: int) -> list[int]:
    """The fake's box init processes (under it, possibly through a namespace helper)."""
    found = []
    for pid in leftovers.descendants(fake_pid):
        try:
            if b"box_init" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


@dataclass
class CpuSnapshot:
    seconds: dict[str, float]


def snapshot(fake_pid: int | None) -> CpuSnapshot:
    own = _stat(os.getpid()) or (0.0, 0.0)
    seconds = {"client": own[0], "fake server": 0.0, "box world": 0.0, "commands": 0.0}
    if fake_pid is not None:
        fake = _stat(fake_pid) or (0.0, 0.0)
        seconds["fake server"] = fake[0]
        seconds["commands"] = fake[1]  # children the fake itself reaped (a box world without init processes)
        for pid in _box_inits(fake_pid):
            times = _stat(pid) or (0.0, 0.0)
            seconds["box world"] += times[0]
            seconds["commands"] += times[1]
    return CpuSnapshot(seconds)


def spent(before: CpuSnapshot, after: CpuSnapshot) -> dict[str, float]:
    """CPU seconds per group between two snapshots (box init processes must outlive both)."""
    return {g: max(0.0, after.seconds[g] - before.seconds[g]) for g in GROUPS}


def report(used: dict[str, float], wall_s: float, mib: float) -> list[str]:
    """One line per group: CPU seconds, share of the wall time, and the MiB/s a whole core would allow."""
    lines = [f"CPU by process over {wall_s:.2f} s wall for {mib:g} MiB ({mib / wall_s:.1f} MiB/s):"]
    for group in GROUPS:
        seconds = used[group]
        ceiling = f"{mib / seconds:7.1f} MiB/s per core" if seconds > 0 and mib > 0 else "-"
        lines.append(f"  {group:<12} {seconds:6.2f} s CPU ({100 * seconds / wall_s:5.1f}% of wall)  ceiling {ceiling}")
    return lines
