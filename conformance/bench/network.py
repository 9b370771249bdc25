"""Figures with a network between the host and the vendor: ``bench --rtt 0,20,50``.

On loopback a call costs a millisecond or two, so a backend that makes two
calls per command looks as fast as one that makes one.  Here every fake sits
behind a network of a fixed round-trip time (fakes/network.py: half of it each
way on every byte, up to a tenth more at random, and two more round trips for
each new connection, TCP's and TLS's handshakes), and each backend is measured beside its vendor's
minimal client inside the host (minimal.py: the host's bare environment over
the vendor's fewest calls), doing the same operations:

- ``cold_start``: create, then the first command's result (release untimed);
- ``warm``: one ``true`` on a warm environment, p50 and p95 (as Hermes sees
  it: the host's own wait loop included, which polls at growing intervals);
- ``session``: create, twenty commands of a short agent turn, release;
- ``sync_push``: the command that carries Hermes's file sync of a small tree;
  the minimal client pushes the same tree as one archive in one exec, then
  runs that command;
- ``sync_back``: the release that copies Hermes's files back (the minimal
  client pulls one archive in one exec, then releases);
- ``execute_code``: Hermes's remote kernel started on a warm environment and
  its first cell's result (conformance/host/kernel.py, the host's calls).

Samples are interleaved round by round (backend, spec, minimal client, in
rotating order), so load from elsewhere falls on every side alike.  Each
operation is traced once more, untimed (calls.py), for the calls each side
made: a backend's calls beyond the minimal client's are listed with the
clause or reason that needs them (goals.py).
"""

from __future__ import annotations

import io
import statistics
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from conformance.backends import KNOWN_BACKENDS
from conformance.bench import calls, minimal
from conformance.bench.measure import percentile
from conformance.bench.minimal import ColdSample
from conformance.bench.targets import KitBackend, SyncTree, Unsupported
from conformance.scope import Scope, restored
from fakes.network import HANDSHAKE_RTTS

MODEL = (
    "every byte crosses in half the round trip, each way, plus up to the jitter at random (order kept); a new "
    "connection pays two more round trips before its first byte reaches the service (TCP's and TLS 1.3's "
    "handshakes); bandwidth is not limited"
)
OPERATIONS = ("cold_start", "warm", "session", "sync_push", "sync_back", "execute_code")
LABELS = {
    "cold_start": "cold start: create to first result",
    "warm_p50": "warm `true`, p50",
    "warm_p95": "warm `true`, p95",
    "warm_exit_p50": "warm `true` to its end (without the host's poll), p50",
    "session": "session: create, 20 commands, release",
    "sync_push": "file sync push (20 files, the carrying command)",
    "sync_back": "file sync back (with the release)",
    "execute_code": "execute_code: kernel start to first result",
}
# A short agent turn: the commands of the session figure (cwd and variables carried between them).
SESSION = [
    "pwd",
    "mkdir -p /tmp/bench-session && cd /tmp/bench-session",
    "printf 'hello\\n' > note.txt",
    "cat note.txt",
    "ls -la",
    "export BENCH_STEP=1",
    'echo "$BENCH_STEP"',
    "wc -c note.txt",
    "cd ..",
    "test -d bench-session && echo present",
    "date +%s",
    "uname -s",
    "echo $((6 * 7))",
    "grep -c hello bench-session/note.txt",
    "cp bench-session/note.txt bench-session/copy.txt",
    "ls bench-session",
    "rm bench-session/copy.txt",
    "true",
    "printf 'done\\n'",
    "rm -rf /tmp/bench-session",
]
SYNC_TREE = (20, 1024, 0)  # small files, bytes each, no big file: what a turn's sync carries
CELL = "print(6 * 7)"


@dataclass(frozen=True)
class Rounds:
    cold: int = 5
    warm: int = 40  # cheap, and a warm command's spread (the jitter) needs them to resolve a millisecond
    session: int = 2
    sync: int = 3
    execute_code: int = 3


QUICK_ROUNDS = Rounds(cold=3, warm=15, session=1, sync=2, execute_code=2)


class Side(Protocol):
    """What is measured: a backend on its fake, or a vendor's minimal client in the host."""

    name: str

    def cold_start(self) -> ColdSample: ...
    def warm(self) -> tuple[float, float]: ...
    def session(self) -> float: ...
    def sync(self) -> tuple[float, float]: ...
    def execute_code(self) -> float: ...
    def close(self) -> None: ...


def _timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def _ok(result: dict[str, Any], what: str) -> dict[str, Any]:
    code = result.get("returncode")
    if code != 0:
        raise RuntimeError(f"{what} exited {code}: {str(result.get('output'))[-300:]!r}")
    return result


class ExitWatch:
    """When each command an environment runs ends, as the host's handle reports it (its ``wait()`` wakes
    this): the command's latency without the host's poll interval, which rounds a result up to its next
    poll.  Installed on the environment's ``_run_bash``; it changes nothing the host sees."""

    def __init__(self, env: Any):
        self.ended: list[float] = []
        run_bash = env._run_bash

        def watched(*args: Any, **kwargs: Any) -> Any:
            handle = run_bash(*args, **kwargs)
            threading.Thread(target=self._wait, args=(handle,), daemon=True, name="bench-exit-watch").start()
            return handle

        env._run_bash = watched

    def _wait(self, handle: Any) -> None:
        handle.wait()
        self.ended.append(time.perf_counter())

    def one(self, run: Callable[[], Any]) -> tuple[float, float]:
        """(seconds until ``run`` returned, seconds until its one command ended)."""
        before = len(self.ended)
        started = time.perf_counter()
        run()
        returned = time.perf_counter()
        deadline = returned + 5
        while len(self.ended) == before and time.perf_counter() < deadline:
            time.sleep(0.001)
        if len(self.ended) == before:
            raise RuntimeError("the command's handle never reported its end")
        return returned - started, self.ended[before] - started


def _first_cell(env: Any, what: str) -> None:
    """Hermes's remote kernel on ``env``: started, its first cell's result read, then stopped (untimed)."""
    from conformance.host.kernel import RemoteKernel

    kernel, why = RemoteKernel.spawn(env)
    if kernel is None:
        raise RuntimeError(f"{what}: the kernel did not start: {why}")
    try:
        outcome = kernel.cell(CELL)
        if outcome.status != "ok" or "42" not in str(outcome.payload.get("stdout", "")):
            raise RuntimeError(f"{what}: the first cell answered {outcome.status}: {outcome.payload!r}"[:400])
    finally:
        kernel.kill()


class BackendSide:
    """A backend on its fake behind the network, driven as Hermes drives it (targets.KitBackend)."""

    def __init__(self, target: KitBackend, scope: Scope):
        self.target, self.scope, self.name = target, scope, target.name
        self._watch: ExitWatch | None = None

    def _run(self, env: Any, command: str) -> dict[str, Any]:
        return _ok(self.target._execute(env, command), f"{self.name}: {command!r}")

    def cold_start(self) -> ColdSample:
        return self.target.cold_start()

    def warm(self) -> tuple[float, float]:
        env = self.target.env
        if self._watch is None:
            self._watch = ExitWatch(env)
        return self._watch.one(lambda: self._run(env, "true"))

    def session(self) -> float:
        def work() -> None:
            env = self.target.run.create(persistent=False)
            try:
                for command in SESSION:
                    self._run(env, command)
            finally:
                self.target.run.release(env)

        return _timed(work)

    def sync(self) -> tuple[float, float]:
        got = self.target.sync(SYNC_TREE)
        if got.files_seen != SYNC_TREE[0] + 1:
            raise RuntimeError(f"{self.name}: the sandbox holds {got.files_seen} of {SYNC_TREE[0] + 1} synced files")
        return got.push_s, got.back_s or 0.0

    def execute_code(self) -> float:
        env = self.target.env
        return _timed(lambda: _first_cell(env, self.name))

    def close(self) -> None:
        self.target.close()


class MinimalSide:
    """A vendor's minimal client inside the host (minimal.host_shell), kept warm for the warm figures."""

    def __init__(self, client: minimal.MinimalClient, scope: Scope):
        self.client, self.scope, self.name = client, scope, f"{client.name} in the host"
        self._made: Any = None
        self._shell: Any = None
        self._watch: ExitWatch | None = None

    @property
    def shell(self) -> Any:
        if self._shell is None:
            self._made = self.client.create()
            self._shell = minimal.host_shell(self.client, self._made)
            self._watch = ExitWatch(self._shell)
        return self._shell

    def _run(self, shell: Any, command: str) -> dict[str, Any]:
        return _ok(shell.execute(command), f"{self.name}: {command!r}")

    def cold_start(self) -> ColdSample:
        return minimal.cold_start(self.client, in_host=True)

    def warm(self) -> tuple[float, float]:
        shell = self.shell
        assert self._watch is not None
        return self._watch.one(lambda: self._run(shell, "true"))

    def session(self) -> float:
        def work() -> None:
            made = self.client.create()
            try:
                shell = minimal.host_shell(self.client, made)
                for command in SESSION:
                    self._run(shell, command)
                shell.cleanup()
            finally:
                self.client.release(made)

        return _timed(work)

    def sync(self) -> tuple[float, float]:
        """The same tree as one archive pushed in one exec before the carrying command; one archive pulled
        back in one exec, then the release."""
        with tempfile.TemporaryDirectory(prefix="bench-sync-") as tmp:
            tree = SyncTree(Path(tmp) / "tree", *SYNC_TREE)
            tree.make()
            into = f"/tmp/bench-sync-{uuid.uuid4().hex[:8]}"
            made = self.client.create()
            try:
                shell = minimal.host_shell(self.client, made)
                started = time.perf_counter()
                minimal.push(self.client, made, _archive(tree.root), into)
                self._run(shell, "true")
                push_s = time.perf_counter() - started
                started = time.perf_counter()
                with tarfile.open(fileobj=io.BytesIO(minimal.pull(self.client, made, into))) as pulled:
                    pulled.extractall(Path(tmp) / "back", filter="data")
                shell.cleanup()
                self.client.release(made)
                made = None
                back_s = time.perf_counter() - started
            finally:
                if made is not None:
                    self.client.release(made)
        return push_s, back_s

    def execute_code(self) -> float:
        shell = self.shell
        return _timed(lambda: _first_cell(shell, self.name))

    def close(self) -> None:
        try:
            if self._shell is not None:
                self._shell.cleanup()
        finally:
            if self._made is not None:
                self.client.release(self._made)
            self.client.close()


def _archive(root: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(root, arcname=".")
    return buffer.getvalue()


@dataclass
class Series:
    """One side's samples of one operation (seconds), or why it has none."""

    samples: list[float] = field(default_factory=list)
    na: str | None = None


@dataclass
class Contender:
    side: Side
    scope: Scope
    series: dict[str, Series] = field(default_factory=dict)
    calls: dict[str, list[str] | str] = field(default_factory=dict)

    def take(self, keys: tuple[str, ...], work: Callable[[], float | tuple[float, ...]]) -> None:
        """One sample of each of ``keys`` from one run of ``work``; an error leaves them n/a with its reason."""
        series = [self.series.setdefault(key, Series()) for key in keys]
        if any(s.na is not None for s in series):
            return
        self.scope.apply()
        try:
            got = work()
        except Unsupported as exc:
            for s in series:
                s.na = str(exc)
            return
        except Exception as exc:
            for s in series:
                s.na = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
            return
        for s, value in zip(series, got if isinstance(got, tuple) else (got,), strict=True):
            s.samples.append(value)


def _interleave(contenders: list[Contender], rounds: int, keys: tuple[str, ...], work: Callable[[Side], Any]) -> None:
    """One unmeasured round, then ``rounds`` rounds of one run per contender, in rotating order."""
    for index in range(rounds + 1):
        shift = index % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            side = contender.side
            contender.take(keys, lambda side=side: work(side))  # type: ignore[misc]  # bound per contender
        if index == 0:
            for contender in contenders:
                for key in keys:
                    contender.series[key].samples.clear()


def _trace(contender: Contender, progress: Callable[[str, str, str], None]) -> None:
    """Each operation once more, untimed, for the calls it made."""
    side = contender.side
    work: dict[str, Callable[[], Any]] = {
        "cold_start": side.cold_start,
        "warm": side.warm,
        "session": side.session,
        "sync": side.sync,
        "execute_code": side.execute_code,
    }
    for key, run in work.items():
        series = contender.series.get("sync_push" if key == "sync" else key)
        if series is not None and series.na is not None:
            contender.calls[key] = series.na
            continue
        contender.scope.apply()
        try:
            with calls.recorded() as seen:
                done = run()
            # A cold start's calls end at its first result: the release after it is not part of it.
            contender.calls[key] = seen.before(done.ended) if isinstance(done, ColdSample) else seen.calls()
        except Exception as exc:
            contender.calls[key] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    warm = contender.calls.get("warm")
    progress(side.name, "calls per warm command", str(warm))


def measure_rtt(
    backends: list[BackendSide],
    minimal_side: MinimalSide | None,
    rounds: Rounds,
    progress: Callable[[str, str, str], None],
) -> list[Contender]:
    """Every operation of every side at one round-trip time, interleaved."""
    contenders = [Contender(side, side.scope) for side in backends]
    if minimal_side is not None:
        contenders.append(Contender(minimal_side, minimal_side.scope))
    with restored():
        steps: list[tuple[tuple[str, ...], int, Callable[[Side], Any]]] = [
            (("cold_start",), rounds.cold, lambda s: s.cold_start().result_s),
            (("warm", "warm_exit"), rounds.warm, lambda s: s.warm()),
            (("session",), rounds.session, lambda s: s.session()),
            (("execute_code",), rounds.execute_code, lambda s: s.execute_code()),
            (("sync_push", "sync_back"), rounds.sync, lambda s: s.sync()),
        ]
        for keys, count, work in steps:
            _interleave(contenders, count, keys, work)
            for key in keys:
                _report(contenders, key, progress)
        for contender in contenders:
            _trace(contender, progress)
    return contenders


def _report(contenders: list[Contender], key: str, progress: Callable[[str, str, str], None]) -> None:
    for contender in contenders:
        series = contender.series.get(key, Series())
        if series.na is not None:
            progress(contender.side.name, key, f"n/a: {series.na}")
        elif series.samples:
            progress(
                contender.side.name,
                key,
                f"median {statistics.median(series.samples) * 1000:.1f} ms of {len(series.samples)}",
            )


def figures(contender: Contender) -> dict[str, Any]:
    """A side's figures in ms: median per operation; warm p50 and p95 as Hermes sees them, and p50 to the
    command's end; n/a with its reason."""
    out: dict[str, Any] = {}
    for key in OPERATIONS:
        names = ("warm_p50", "warm_p95", "warm_exit_p50") if key == "warm" else (key,)
        for name in names:
            series = contender.series.get("warm_exit" if name == "warm_exit_p50" else key, Series(na="not measured"))
            if series.na is not None or not series.samples:
                out[name] = {"ms": None, "na": series.na or "no samples"}
                continue
            value = percentile(series.samples, 95) if name == "warm_p95" else statistics.median(series.samples)
            out[name] = {"ms": round(value * 1000, 2), "samples_ms": [round(s * 1000, 2) for s in series.samples]}
    return out


def call_table(contender: Contender, baseline: Contender | None) -> dict[str, Any]:
    """Per operation: the calls made, and those beyond the baseline's (a multiset difference)."""
    table: dict[str, Any] = {}
    for key, made in contender.calls.items():
        entry: dict[str, Any] = {"calls": made}
        base = baseline.calls.get(key) if baseline is not None else None
        if isinstance(made, list) and isinstance(base, list):
            entry["beyond_minimal"] = calls.beyond(made, base)
            entry["minimal_calls"] = base
        table[key] = entry
    return table


def has_network(entry: Any) -> bool:
    """Whether an entry's sandboxes are a service's behind a fake server (a network to delay)."""
    from fakes.services import SERVERS

    if entry.live:
        return False
    fake = KNOWN_BACKENDS[entry.name].fake if entry.known else entry.fake
    return fake in SERVERS


def groups(entries: list[Any]) -> list[tuple[Any | None, list[Any]]]:
    """The entries with a network, by vendor fake: (the known backend whose vendor's minimal client is the
    group's baseline, or None, the group's entries)."""
    by_fake: dict[str, list[Any]] = {}
    for entry in entries:
        if has_network(entry):
            fake = KNOWN_BACKENDS[entry.name].fake if entry.known else entry.fake
            by_fake.setdefault(str(fake), []).append(entry)
    return [
        (next((e for e in group if e.known and e.name in minimal.MINIMAL_CLIENTS), None), group)
        for group in by_fake.values()
    ]


def run(
    entries: list[Any],
    rtts: list[float],
    rounds: Rounds,
    workdir: Path,
    progress: Callable[[str, str, str], None],
    *,
    jitter_ms: float | None = None,
) -> dict[str, Any]:
    """The ``network`` section: every entry on a vendor fake, at each round-trip time (with ``jitter_ms``,
    or a tenth of that time), beside its vendor's minimal client in the host (a spec entry beside the
    reference it is measured with as well)."""
    by_rtt: dict[str, Any] = {}
    clean = Scope.capture()  # each run exports its fake's variables: every run starts from this
    for rtt in rtts:
        at: dict[str, Any] = {
            e.name: {"na": "its sandboxes are on this machine: no network to delay"}
            for e in entries
            if not has_network(e)
        }
        jitter = rtt / 10 if jitter_ms is None else jitter_ms
        for reference, group in groups(entries):
            at.update(_measure_group(reference, group, rtt, jitter, rounds, workdir, progress, clean))
        by_rtt[f"{rtt:g}"] = at
    return {
        "rtts_ms": [float(f"{r:g}") for r in rtts],
        "jitter_ms": "a tenth of each round trip" if jitter_ms is None else jitter_ms,
        "handshake_rtts": HANDSHAKE_RTTS,
        "rounds": {
            "cold": rounds.cold,
            "warm": rounds.warm,
            "session": rounds.session,
            "sync": rounds.sync,
            "execute_code": rounds.execute_code,
        },
        "model": MODEL,
        "by_rtt": by_rtt,
    }


def _measure_group(
    reference: Any | None,
    group: list[Any],
    rtt: float,
    jitter: float,
    rounds: Rounds,
    workdir: Path,
    progress: Callable[[str, str, str], None],
    clean: Scope,
) -> dict[str, Any]:
    """One vendor's entries (each on its own fake behind the network) and that vendor's minimal client."""
    sides: list[BackendSide] = []
    client_side: MinimalSide | None = None
    found: dict[str, Any] = {}
    try:
        for entry in group:
            progress(entry.name, f"network {rtt:g} ms", "starting its run behind the network")
            clean.apply()
            target = KitBackend(
                entry.name,
                workdir / f"{entry.directory}-rtt{rtt:g}",
                replace(entry.run_options(), rtt_ms=rtt, jitter_ms=jitter),
            )
            sides.append(BackendSide(target, Scope.capture()))
            if reference is not None and entry is reference:
                client = minimal.for_backend(reference.name, dict(getattr(target.run.fake, "env", None) or {}))
                if client is not None:
                    client_side = MinimalSide(client, Scope.capture())
        contenders = measure_rtt(sides, client_side, rounds, progress)
        baseline = contenders[-1] if client_side is not None else None
        for entry, contender in zip(group, contenders, strict=False):
            found[entry.name] = {"figures": figures(contender), "calls": call_table(contender, baseline)}
            if baseline is not None:
                found[entry.name]["minimal"] = {"label": baseline.side.name, "figures": figures(baseline)}
            if not entry.known and reference is not None:
                found[entry.name]["reference"] = reference.name
    finally:
        # The minimal client first: its sandboxes live on the reference run's fake.
        closing: list[MinimalSide | BackendSide] = [client_side] if client_side is not None else []
        for closable in [*closing, *sides]:
            closable.scope.apply()
            try:
                closable.close()
            except Exception as exc:
                progress(closable.name, "close", f"failed: {type(exc).__name__}: {exc}")
        clean.apply()
    return found


def _beyond(name: str, extra: dict[str, int] | None) -> str:
    from conformance.bench import goals

    if not extra:
        return ""
    reasons = goals.WHY.get(name, {})
    return "; beyond: " + "; ".join(
        f"{count} x `{call}` ({reasons.get(call, 'no reason recorded: a call to look at')})"
        for call, count in sorted(extra.items())
    )


def markdown(data: dict[str, Any]) -> list[str]:
    """The network section of results.md: per round-trip time, each backend beside its minimal client."""
    from conformance.bench import goals

    section = data.get("network") or {}
    by_rtt = section.get("by_rtt") or {}
    if not by_rtt:
        return []
    lines = [
        "## Network",
        "",
        f"Each vendor fake behind a network of a fixed round-trip time ({section.get('model', '')}). Per backend, "
        "the median of interleaved rounds beside its vendor's minimal client inside the host (the host's bare "
        "environment over the vendor's fewest calls); ratios are backend / minimal client. Warm figures are as "
        "Hermes sees them: its wait loop polls at 5 ms growing by half each time, so a command's result is "
        "seen at the poll after it ended.",
        "",
    ]
    keys = ["cold_start", "warm_p50", "warm_p95", "warm_exit_p50", "session", "sync_push", "sync_back", "execute_code"]
    for rtt, every in by_rtt.items():
        at = {name: entry for name, entry in every.items() if "figures" in entry}
        local = [f"{name} ({entry.get('na', 'not measured')})" for name, entry in every.items() if name not in at]
        lines += [f"### {rtt} ms round trip", ""]
        if local:
            lines += [f"Not measured: {'; '.join(local)}.", ""]
        if not at:
            continue
        lines += ["| figure | " + " | ".join(at) + " |", "| --- |" + " --- |" * len(at)]
        for key in keys:
            cells = []
            for entry in at.values():
                own = entry["figures"].get(key) or {}
                base = ((entry.get("minimal") or {}).get("figures") or {}).get(key) or {}
                if own.get("ms") is None:
                    cells.append(f"n/a ({own.get('na', 'not measured')})")
                    continue
                cell = f"{own['ms']:.0f} ms"
                if base.get("ms"):
                    cell += f" / {base['ms']:.0f} ms = {own['ms'] / base['ms']:.2f}x"
                cells.append(cell)
            lines.append(f"| {LABELS[key]} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "Calls per operation (one traced run each), and those beyond the minimal client's with the reason "
            "for each (execute_code's count follows how soon its result is polled, so it is not compared):",
            "",
        ]
        for name, entry in at.items():
            for key, table in (entry.get("calls") or {}).items():
                made = table.get("calls")
                count = len(made) if isinstance(made, list) else made
                base = table.get("minimal_calls")
                base_text = f", minimal client {len(base)}" if isinstance(base, list) else ""
                extra = None if key == "execute_code" else table.get("beyond_minimal")
                lines.append(f"- {name}, {key}: {count}{base_text}{_beyond(name, extra)}")
        lines.append("")
    found = section.get("goals") or {}
    if found:
        lines += [
            f"Targets at {goals.NETWORK_RTT_MS:g} ms: warm p50 at most {goals.WARM_VS_MINIMAL_MAX:g}x the minimal "
            f"client in the host with no call per warm command beyond its calls, cold start at most "
            f"{goals.COLD_VS_MINIMAL_MAX:g}x; a backend measured beside a reference: the reference's warm p50 at "
            "most 1.0x its own.",
            "",
            "| backend | warm vs minimal | to the end vs minimal | cold vs minimal | warm calls beyond minimal | "
            "reference's warm vs this | to the end |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, goal in found.items():
            checks = goal["checks"]

            def shown(key: str, unit: str = "x", checks: dict[str, Any] = checks) -> str:
                return goals.cell(checks[key], unit) if key in checks else "-"

            lines.append(
                f"| {name} | {shown('warm_vs_minimal')} | {shown('warm_exit_vs_minimal')} | "
                f"{shown('cold_vs_minimal')} | {shown('warm_calls_beyond_minimal', '')} | "
                f"{shown('reference_warm_vs_this')} | {shown('reference_warm_exit_vs_this')} |"
            )
        lines.append("")
    return lines
