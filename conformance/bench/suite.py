"""The suite figures: one ``certify`` per backend, where its wall time and CPU seconds go.

``run`` certifies one backend on its fake exactly as a user does
(``hermes-backend-kit certify --backend B --workers W``) and measures:

- wall time, and the machine's load average before and after;
- CPU seconds of everything the run started, exactly (this process reaps the
  whole tree: it is a child subreaper while the run lasts, so a process that
  detaches, such as a Box Lite box daemon, is still counted);
- the same CPU split by process kind (``KINDS``), from a sampler that reads
  ``/proc`` every ``SAMPLE_S`` seconds: each process's own time is charged to
  its kind, and what a process reaped of children the sampler never saw (a
  command that lived less than a sample) to the kind its children have;
  whatever the sampler could not place (CPU a process spent after its last
  sample) is ``unattributed``;
- per check (certify's ``--check-costs``): wall time, CPU seconds and
  environments created; the totals, CPU seconds per check and the ten most
  expensive checks.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance import check_costs

SUITE_TIMEOUT_S = 1800
SAMPLE_S = 0.05
PR_SET_CHILD_SUBREAPER = 36
KINDS = (
    "kit",  # certify and pytest's controller
    "workers",  # pytest-xdist workers: the host, the backend's client, the checks
    "fake server",  # each fake vendor service's own process
    "box world",  # the isolation engine's processes (fork server, set-up, box inits) and Box Lite's daemons
    "helpers",  # other Python processes the backend or a check started (probes, kernels, hermes-box)
    "commands",  # everything else: the sandboxes' shells and programs
)
# A process the sampler never saw was reaped by its parent: charged to what that parent's children are.
_CHILDREN_OF = {
    "kit": "workers",
    "workers": "commands",
    "fake server": "box world",
    "box world": "commands",
    "helpers": "commands",
    "commands": "commands",
}
_TICK = os.sysconf("SC_CLK_TCK")


def kind_of(cmdline: bytes) -> str:
    """The process kind of a command line (``/proc/PID/cmdline``)."""
    text = cmdline.replace(b"\0", b" ").decode(errors="replace")
    if "box_init.py" in text or "reference.box_lite.daemon" in text:
        return "box world"
    if "fakes.process" in text:
        return "fake server"
    if "exec(eval(sys.stdin.readline()))" in text:
        return "workers"
    if "hermes-backend-kit" in text or "-m pytest" in text:
        return "kit"
    argv0 = os.path.basename(cmdline.split(b"\0", 1)[0].decode(errors="replace"))
    return "helpers" if argv0.startswith("python") else "commands"


@dataclass
class _Seen:
    kind: str
    parent: int
    own: float = 0.0  # CPU seconds of the process itself, at its last sample
    reaped: float = 0.0  # of the children it has reaped
    alive: bool = True


@dataclass
class Sampler:
    """Every process below this one, read from /proc every ``SAMPLE_S`` seconds (see the module docstring)."""

    root: int = field(default_factory=os.getpid)
    seen: dict[int, _Seen] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="suite-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        stats: dict[int, tuple[int, float, float]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            own = (int(fields[11]) + int(fields[12])) / _TICK
            stats[int(entry)] = (int(fields[1]), own, (int(fields[13]) + int(fields[14])) / _TICK)
        ours = {self.root}
        changed = True
        while changed:  # the processes below the root (pids are few; a few passes suffice)
            changed = False
            for pid, (parent, _, _) in stats.items():
                if pid not in ours and parent in ours:
                    ours.add(pid)
                    changed = True
        ours.discard(self.root)
        for seen in self.seen.values():
            seen.alive = False
        for pid in ours:
            parent, own, reaped = stats[pid]
            known = self.seen.get(pid)
            if known is None or (known.parent != parent and own < known.own):  # a new process (a reused pid)
                known = self.seen[pid] = _Seen(_kind(pid), parent)
            known.parent, known.own, known.reaped, known.alive = parent, own, reaped, True

    def by_kind(self, total: float) -> dict[str, float]:
        """CPU seconds per kind, ``unattributed`` making up ``total`` (the exact figure).

        A process's reaped time holds its ended children's whole subtrees.  A child's last sample
        may predate its own children's end (a box's set-up process reaps the box's init as the box
        ends), so a subtree's time is taken as the larger of what its root had reaped when last
        seen and what its ended children's subtrees add up to: nothing is charged twice.
        """
        spent = dict.fromkeys(KINDS, 0.0)
        children: dict[int, list[int]] = {}
        for pid, seen in self.seen.items():
            spent[seen.kind] += seen.own
            if not seen.alive:
                children.setdefault(seen.parent, []).append(pid)
        subtree: dict[int, float] = {}

        def total_of(pid: int) -> float:  # the ended child's own time and all it reaped, seen or not
            if pid not in subtree:
                seen = self.seen[pid]
                subtree[pid] = seen.own + max(seen.reaped, sum(total_of(c) for c in children.get(pid, ())))
            return subtree[pid]

        for pid, seen in self.seen.items():
            unseen = seen.reaped - sum(total_of(c) for c in children.get(pid, ()))
            if unseen > 0:
                spent[_CHILDREN_OF[seen.kind]] += unseen
        spent["unattributed"] = max(0.0, total - sum(spent.values()))
        return {k: round(v, 2) for k, v in spent.items()}


def _kind(pid: int) -> str:
    try:
        return kind_of(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return "commands"


@contextlib.contextmanager
def _subreaper() -> Any:
    """This process adopts every orphan of the run while it lasts (Linux), so detached processes are counted."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        with contextlib.suppress(ChildProcessError):  # adopted orphans that ended
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass


def command(backend: str, workers: int, out: Path, costs: Path, extra: Sequence[str] = ()) -> list[str]:
    """certify's command line; ``extra``: its options for a backend that is not a known name (--fake, ...)."""
    return [
        sys.executable,
        "-m",
        "conformance.cli",
        "certify",
        "--backend",
        backend,
        "--workers",
        str(workers),
        "--out",
        str(out),
        "--check-costs",
        str(costs),
        *extra,
    ]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(backend: str, env: dict[str, str], workers: int = 2, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Certify ``backend`` once and measure it (see the module docstring); the figures as results.json keeps them."""
    with tempfile.TemporaryDirectory(prefix="kit-bench-suite-") as tmp:
        out, costs = Path(tmp) / "out", Path(tmp) / "costs.jsonl"
        cmd = command(backend, workers, out, costs, extra)
        load_before = os.getloadavg()[0]
        sampler = Sampler()
        with _subreaper():
            cpu_before, started = _children_cpu(), time.perf_counter()
            sampler.start()
            try:
                proc = subprocess.run(
                    cmd,
                    env=env,
                    cwd=tmp,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    timeout=SUITE_TIMEOUT_S,
                    text=True,
                    errors="replace",
                )
                returncode, output = proc.returncode, proc.stdout
            except subprocess.TimeoutExpired as exc:
                returncode, output = -1, f"timed out after {SUITE_TIMEOUT_S}s: {exc.output or ''}"
            wall = time.perf_counter() - started
            sampler.stop()
        cpu = _children_cpu() - cpu_before
        checks = check_costs.read(costs)
    tail = [line for line in output.splitlines() if line.strip()]
    ranked = sorted(checks, key=lambda c: -c["cpu_s"])
    return {
        "workers": workers,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "cpu_by_kind_s": sampler.by_kind(cpu),
        "load_average_1m": {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)},
        "checks": len(checks),
        "environments": sum(c["envs"] for c in checks),
        "cpu_per_check_s": round(cpu / len(checks), 3) if checks else None,
        "checks_cpu_s": round(sum(c["cpu_s"] for c in checks), 2),
        "most_expensive": [
            {"check": c["check"], "cpu_s": c["cpu_s"], "wall_s": round(c["wall_s"], 2), "envs": c["envs"]}
            for c in ranked[:10]
        ],
        "returncode": returncode,
        "verdict": tail[-1] if tail else "",
    }


def _short_verdict(line: str) -> str:
    """The verdict line up to its MUST count: "CERTIFIED (full profile: 113/113 MUST clauses pass)"."""
    head, sep, _ = line.partition(",")
    return f"{head})" if sep and "(" in head and ")" not in head else line


def markdown(data: dict[str, Any]) -> list[str]:
    """The suite section of results.md (empty when the run measured no suite)."""
    suites: dict[str, Any] = data.get("suite") or {}
    if not suites:
        return []
    lines = [
        "## Suite",
        "",
        "One `hermes-backend-kit certify --backend B` per backend on its fake. CPU: every process the run "
        "started, exactly; by kind from /proc samples every "
        f"{SAMPLE_S * 1000:.0f} ms (conformance/bench/suite.py). Load: 1-minute load average at start and end.",
        "",
        "| backend | workers | wall s | CPU s | " + " | ".join(KINDS) + " | unattributed | checks | envs | "
        "CPU s per check | load | verdict |",
        "| --- |" + " --- |" * (len(KINDS) + 9),
    ]
    for name, s in suites.items():
        kinds = s["cpu_by_kind_s"]
        load = s["load_average_1m"]
        lines.append(
            f"| {name} | {s['workers']} | {s['wall_s']:.1f} | {s['cpu_s']:.1f} | "
            + " | ".join(f"{kinds.get(k, 0.0):.1f}" for k in KINDS)
            + f" | {kinds.get('unattributed', 0.0):.1f} | {s['checks']} | {s['environments']} | "
            f"{s['cpu_per_check_s']} | {load['start']:.2f}-{load['end']:.2f} | {_short_verdict(s['verdict'])} |"
        )
    lines += ["", "The ten most expensive checks of each (CPU seconds of the run's processes during the check):", ""]
    for name, s in suites.items():
        lines.append(
            f"- **{name}**: "
            + "; ".join(
                f"`{c['check'].split('::', 1)[-1]}` {c['cpu_s']:.2f} s CPU, {c['wall_s']:.2f} s wall, {c['envs']} env"
                for c in s["most_expensive"]
            )
        )
    return [*lines, ""]
