"""``python -m conformance.bench`` and ``hermes-backend-kit bench``: measure every selected backend and the
baseline in one process (``--backends`` names the kit knows, or ``--backend SPEC`` beside a reference)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.backends import KNOWN_BACKENDS
from conformance.bench import calls, cold, entries, goals, growth, minimal, network, options, report, suite, world
from conformance.bench.cold import Contender
from conformance.bench.measure import MIB, human_size, measured, parse_size, percentile, timed_ms
from conformance.bench.report import Figure, TargetResult
from conformance.bench.targets import KitBackend, LocalBash, Target, Unsupported, concurrent_floods
from conformance.errors import UsageError
from conformance.scope import Scope, restored

REPEAT_UP_TO = 4 * MIB  # output sizes up to this are repeated (median of 3); larger ones run once


@dataclass
class Plan:
    sizes: list[int]
    stream: int
    stdin: int
    sync: tuple[int, int, int]  # small files, bytes each, big file bytes
    concurrency: list[int]
    per_call: int
    rounds: int
    cold_samples: int  # interleaved rounds of the cold-start figure


FULL = Plan(
    [1024, 16 * 1024, 256 * 1024, 4 * MIB, 64 * MIB, 100 * MIB],
    100 * MIB,
    50 * MIB,
    (1000, 1024, 50 * MIB),
    [1, 2, 4, 8, 16],
    4 * MIB,
    50,
    9,
)
QUICK = Plan(
    [1024, 16 * 1024, 256 * 1024, 4 * MIB], 4 * MIB, 4 * MIB, (100, 1024, 4 * MIB), [1, 2, 4], 256 * 1024, 10, 5
)


class MissingExtra(SystemExit):
    pass


def check_extras(backends: list[str]) -> None:
    """Fail before measuring anything when a backend's SDK is not installed."""
    for name in backends:
        if name not in KNOWN_BACKENDS:
            raise SystemExit(f"bench: unknown backend {name!r}; known: {', '.join(KNOWN_BACKENDS)}")
        missing = KNOWN_BACKENDS[name].missing_extra()
        if missing:
            raise MissingExtra(
                f"bench: {missing} "
                f"(or drop it: --backends {','.join(b for b in backends if b != name) or 'tempdir_box'})"
            )


class Progress:
    def __init__(self) -> None:
        self.started = time.perf_counter()

    def __call__(self, target: str, figure: str, text: str) -> None:
        print(
            f"[{time.perf_counter() - self.started:7.1f}s] {target:<20} {figure:<30} {text}",
            file=sys.stderr,
            flush=True,
        )


def _attempt(
    result: TargetResult, keys: list[str], progress: Progress, figure: str, work: Callable[[], dict[str, Figure]]
) -> None:
    """Run one figure's measurement; a failure or a missing capability becomes n/a with its reason."""
    try:
        result.figures.update(work())
    except Unsupported as exc:
        for k in keys:
            result.figures[k] = Figure(na=str(exc))
        progress(result.name, figure, f"n/a: {exc}")
    except Exception as exc:
        reason = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        for k in keys:
            result.figures[k] = Figure(na=reason)
        progress(result.name, figure, reason)
        traceback.print_exc(file=sys.stderr)


def cold_figure(contender: Contender | None) -> Figure:
    """The cold-start figure from the interleaved rounds (cold.py)."""
    if contender is None:
        return Figure(na="not measured")
    if contender.error is not None:
        return Figure(na=f"failed: {contender.error}")
    return Figure(contender.result_ms, detail=contender.detail())


def measure(target: Target, plan: Plan, progress: Progress, cold_start: Figure) -> TargetResult:
    """Every figure of ``target`` but the cold start, which is measured interleaved beforehand."""
    result = TargetResult(target.name, target.label)
    result.figures["cold_start_ms"] = cold_start
    name = target.name

    def rtt() -> dict[str, Figure]:
        samples = timed_ms(target.round_trip, plan.rounds)
        p50, p95 = percentile(samples, 50), percentile(samples, 95)
        progress(name, "round trip", f"p50 {p50:.2f} ms, p95 {p95:.2f} ms ({len(samples)} rounds)")
        return {"rtt_p50_ms": Figure(p50), "rtt_p95_ms": Figure(p95)}

    def output(mode: str) -> dict[str, Figure]:
        bounded = mode == "bounded"
        sizes = sorted(set(plan.sizes) | {plan.stream})
        points: list[dict[str, Any]] = []
        for size in sizes:
            runs = [
                measured(functools.partial(target.flood, size, bounded=bounded))
                for _ in range(3 if size <= REPEAT_UP_TO else 1)
            ]
            latency = statistics.median(r.seconds for r in runs) * 1000
            rss = max(r.rss_growth_mib for r in runs)
            points.append({"bytes": size, "latency_ms": round(latency, 3), "rss_mib": round(rss, 2)})
            progress(
                name,
                f"output {mode} {human_size(size)}",
                f"{latency:.1f} ms, {size / MIB / (latency / 1000):.1f} MiB/s, RSS +{rss:.1f} MiB",
            )
        series = [p for p in points if p["bytes"] in plan.sizes]
        xs = [float(p["bytes"]) for p in series]
        result.growth[f"output_{mode}"] = {
            "capture": mode,
            "points": series,
            "fits": {
                "latency": growth.cost_growth(xs, [p["latency_ms"] for p in series]),
                "memory": growth.cost_growth(xs, [p["rss_mib"] for p in series], floor=report.RSS_FLOOR_MIB),
            },
        }
        at = next(p for p in points if p["bytes"] == plan.stream)
        rate = plan.stream / MIB / (at["latency_ms"] / 1000)
        return {f"output_{mode}_mib_s": Figure(rate), f"rss_{mode}_mib": Figure(at["rss_mib"])}

    def concurrency() -> dict[str, Figure]:
        points: list[dict[str, Any]] = []
        for n in plan.concurrency:
            sample = measured(functools.partial(concurrent_floods, target, n, plan.per_call))
            rate = n * plan.per_call / MIB / sample.seconds
            points.append(
                {
                    "n": n,
                    "mib_s": round(rate, 2),
                    "call_p50_ms": round(percentile(sample.value, 50), 2),
                    "rss_mib": round(sample.rss_growth_mib, 2),
                }
            )
            progress(name, f"concurrency n={n}", f"{rate:.1f} MiB/s total, {human_size(plan.per_call)} per call")
        result.growth["concurrency"] = {
            "bytes_per_call": plan.per_call,
            "capture": "bounded",
            "points": points,
            "fits": {"throughput": growth.scaling_growth([p["n"] for p in points], [p["mib_s"] for p in points])},
        }
        return {}

    def stdin() -> dict[str, Figure]:
        data = ("y" * 1023 + "\n") * (plan.stdin // 1024)
        sample = measured(lambda: target.stdin(data))
        if sample.value != len(data):
            raise RuntimeError(f"wc -c counted {sample.value} bytes of stdin, {len(data)} were sent")
        rate = plan.stdin / MIB / sample.seconds
        progress(name, f"stdin {human_size(plan.stdin)}", f"{rate:.1f} MiB/s")
        return {"stdin_mib_s": Figure(rate, detail={"seconds": round(sample.seconds, 3)})}

    def sync() -> dict[str, Figure]:
        got = target.sync(plan.sync)
        want = plan.sync[0] + 1
        if got.files_seen != want or got.big_bytes_seen != plan.sync[2]:
            raise RuntimeError(
                f"the sandbox holds {got.files_seen} of {want} files and "
                f"{got.big_bytes_seen} of {plan.sync[2]} bytes of the big file"
            )
        progress(name, "file sync", f"push {got.push_s:.2f} s, back {got.back_s:.2f} s")
        return {"sync_push_s": Figure(got.push_s, detail={"files": want}), "sync_back_s": Figure(got.back_s)}

    _attempt(result, ["rtt_p50_ms", "rtt_p95_ms"], progress, "round trip", rtt)
    _attempt(result, ["output_bounded_mib_s", "rss_bounded_mib"], progress, "output bounded", lambda: output("bounded"))
    _attempt(result, ["output_full_mib_s", "rss_full_mib"], progress, "output full", lambda: output("full"))
    _attempt(result, [], progress, "concurrency", concurrency)
    _attempt(result, ["stdin_mib_s"], progress, "stdin", stdin)
    _attempt(result, ["sync_push_s", "sync_back_s"], progress, "file sync", sync)  # last: it adds host files
    return result


def _plan(args: argparse.Namespace) -> Plan:
    plan = QUICK if args.quick else FULL
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else plan.sizes
    stream = parse_size(args.stream_size) if args.stream_size else plan.stream
    sync = (
        args.sync_files if args.sync_files is not None else plan.sync[0],
        plan.sync[1],
        parse_size(args.sync_big_size) if args.sync_big_size else plan.sync[2],
    )
    return Plan(
        sorted(sizes),
        stream,
        parse_size(args.stdin_size) if args.stdin_size else plan.stdin,
        sync,
        [int(n) for n in args.concurrency.split(",")] if args.concurrency else plan.concurrency,
        parse_size(args.per_call_size) if args.per_call_size else plan.per_call,
        args.rounds or plan.rounds,
        args.cold_samples or plan.cold_samples,
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m conformance.bench", description=options.DESCRIPTION)
    options.add_options(p)
    return p


def _measure_world(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    figure, detail = world.measure(args.world_rounds)
    note = "" if detail["isolated"] else f" (boxes NOT isolated: {detail['paths_note']})"
    progress(
        "world",
        "spawn-to-exit of true",
        f"p50 {figure['spawn_p50_ms']:.2f} ms against bash -c "
        f"{figure['bash_c_p50_ms']:.2f} ms: ratio {figure['ratio']:.2f}{note}",
    )
    return {"world": figure, "world_detail": detail}


def _measure_suite(entry: entries.Entry, env: dict[str, str], progress: Progress) -> dict[str, Any]:
    name, workers = entry.name, entry.workers
    progress(name, "certify", f"--workers {workers}, with each check's cost")
    figures = suite.run(entry.spec, env, workers, entry.certify_args())
    kinds = ", ".join(f"{k} {v:.1f}" for k, v in figures["cpu_by_kind_s"].items() if v)
    progress(
        name,
        "certify",
        f"{figures['wall_s']:.1f} s wall, {figures['cpu_s']:.1f} s CPU ({kinds}); {figures['checks']} checks, "
        f"{figures['environments']} environments; exit {figures['returncode']}: {figures['verdict'][:80]}",
    )
    return figures


def suite_only(args: argparse.Namespace) -> int:
    """Certify the selected backends, measured, and update only the 'suite' key of --out (and its .md)."""
    selected = _selected(args)
    backends = [e.name for e in selected]
    out = Path(args.out)
    data: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    progress = Progress()
    suites = dict(data.get("suite") or {})
    for entry in selected:
        suites[entry.name] = _measure_suite(entry, dict(os.environ), progress)
    data["suite"] = suites
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    out.with_suffix(".md").write_text(
        report.to_markdown(data) if data.get("targets") else "\n".join(suite.markdown(data))
    )
    print("\n".join(suite.markdown(data)))
    return 1 if any(suites[n]["returncode"] not in (0, 1) for n in backends) else 0


def _rtts(args: argparse.Namespace) -> list[float]:
    """The round-trip times of the network section: --rtt, else 50 ms in a full run or with
    --network-only, none in a quick one."""
    if args.rtt is None:
        return [] if args.quick and not args.network_only else [goals.NETWORK_RTT_MS]
    found: list[float] = []
    for part in str(args.rtt).split(","):
        try:
            value = float(part.strip())
        except ValueError:
            value = -1.0
        if not 0 <= value <= 10_000:
            raise UsageError(
                f"bench: --rtt {args.rtt!r}: {part.strip()!r} is not a round-trip time in milliseconds",
                "give milliseconds from 0 to 10000, comma-separated: --rtt 0,20,50",
            )
        found.append(value)
    return list(dict.fromkeys(found))


def _jitter(args: argparse.Namespace) -> float | None:
    """--jitter in milliseconds (None: a tenth of each round-trip time)."""
    if args.jitter is None:
        return None
    if not 0 <= args.jitter <= 10_000:
        raise UsageError(
            f"bench: --jitter {args.jitter:g} is not a jitter in milliseconds",
            "give milliseconds from 0 to 10000 (0: the same delay on every crossing)",
        )
    return float(args.jitter)


def _network(
    selected: list[entries.Entry], rtts: list[float], jitter: float | None, quick: bool, progress: Progress
) -> dict[str, Any]:
    """The network section of ``selected`` at ``rtts`` with its goals; a usage error when none of them has a
    network to delay."""
    if not any(network.has_network(e) for e in selected):
        raise UsageError(
            "bench: --rtt measures backends on a vendor fake, and none of these is",
            "name one (--backends upstash_box,deepinfra,cloudflare_sandbox), or measure --backend SPEC "
            "beside one: --reference deepinfra",
        )
    rounds = network.QUICK_ROUNDS if quick else network.Rounds()
    with tempfile.TemporaryDirectory(prefix="kit-bench-net-") as tmp:
        section = network.run(selected, rtts, rounds, Path(tmp), progress, jitter_ms=jitter)
    section["goals"] = goals.network(section)
    return section


def network_only(args: argparse.Namespace) -> int:
    """Measure only the network section and update the 'network' key of --out (and its .md)."""
    selected = _selected(args)
    section = _network(selected, _rtts(args), _jitter(args), args.quick, Progress())
    out = Path(args.out)
    data: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    data["network"] = section
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    out.with_suffix(".md").write_text(
        report.to_markdown(data) if data.get("targets") else "\n".join(network.markdown(data)) + "\n"
    )
    print("\n".join(network.markdown(data)))
    return 0


def world_only(args: argparse.Namespace) -> int:
    """Update only the world figure of an existing results.json (and regenerate its .md from it)."""
    out = Path(args.out)
    data: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    data.update(_measure_world(args, Progress()))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    markdown = report.to_markdown(data) if data.get("targets") else "\n".join(world.markdown(data))
    out.with_suffix(".md").write_text(markdown)
    print("\n".join(world.markdown(data)))
    return 0


def _start_backends(
    selected: list[entries.Entry], workdir: Path, progress: Progress, clean: Scope
) -> tuple[dict[str, tuple[KitBackend, Scope]], dict[str, TargetResult]]:
    """Every backend on its fake, all at once (the cold start is interleaved across them), each with the
    environment its run set up; a backend that cannot start becomes a result with its error."""
    kits: dict[str, tuple[KitBackend, Scope]] = {}
    failed: dict[str, TargetResult] = {}
    for entry in selected:
        name = entry.name
        clean.apply()
        progress(name, "start", f"{entry.description}; starting its run")
        try:
            target = KitBackend(name, workdir / entry.directory, entry.run_options())
        except Exception as exc:
            failed[name] = TargetResult(name, name, error=f"{type(exc).__name__}: {exc}")
            progress(name, "start", f"failed: {exc}")
            continue
        kits[name] = (target, Scope.capture())
    return kits, failed


def _minimal_clients(kits: dict[str, tuple[KitBackend, Scope]]) -> dict[str, minimal.MinimalClient]:
    """Each reference backend's minimal client, pointed at that backend's fake."""
    clients: dict[str, minimal.MinimalClient] = {}
    for name, (target, _) in kits.items():
        fake_env = dict(getattr(target.run.fake, "env", None) or {})
        client = minimal.for_backend(name, fake_env) if fake_env else None
        if client is not None:
            clients[name] = client
    return clients


def _contenders(
    local: LocalBash, kits: dict[str, tuple[KitBackend, Scope]], clients: dict[str, minimal.MinimalClient]
) -> tuple[dict[str, Contender], dict[str, Contender]]:
    """The cold-start contenders: local bash, each backend, and each reference backend's minimal client."""
    contenders = {"local": Contender("local", local.cold_start)}
    contenders.update({name: Contender(name, target.cold_start, scope) for name, (target, scope) in kits.items()})
    minimal_contenders = {
        name: Contender(client.name, client.cold_start, kits[name][1]) for name, client in clients.items()
    }
    for name, client in clients.items():
        minimal_contenders[f"{name}+host"] = Contender(
            f"{client.name} in the host", functools.partial(client.cold_start, in_host=True), kits[name][1]
        )
    return contenders, minimal_contenders


def _minimal_stream(client: minimal.MinimalClient, size: int, progress: Progress) -> dict[str, Any]:
    """The minimal client's output throughput at ``size`` (one run, as the backends' large sizes)."""
    try:
        rate = size / MIB / client.stream(size)
    except Exception as exc:
        reason = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        progress(client.name, f"stream {human_size(size)}", reason)
        return {"output_mib_s": None, "output_na": reason}
    progress(client.name, f"stream {human_size(size)}", f"{rate:.1f} MiB/s (no host, no capture)")
    return {"output_mib_s": report.round_figure(rate)}


def _calls(kit: tuple[KitBackend, Scope], client: minimal.MinimalClient, progress: Progress) -> dict[str, Any]:
    """The protocol calls of one more cold start of the backend and of its minimal client in the host
    (not timed), and those the backend makes beyond the client's."""
    target, scope = kit
    made: dict[str, list[str]] = {}
    with restored():
        scope.apply()
        for side, start in (("backend", target.cold_start), ("minimal", functools.partial(client.cold_start, True))):
            try:
                with calls.recorded() as seen:
                    sample = start()
            except Exception as exc:
                return {"error": f"{side}: {type(exc).__name__}: {str(exc)[:300]}"}
            made[side] = seen.before(sample.ended)
    extra = calls.beyond(made["backend"], made["minimal"])
    progress(target.name, "calls", f"{len(made['backend'])} to the first result; beyond the minimal client: {extra}")
    return {**made, "beyond": extra}


def _minimal_entry(contender: Contender) -> dict[str, Any]:
    if contender.error is not None:
        return {"label": contender.name, "cold_start_ms": None, "error": contender.error}
    return {
        "label": contender.name,
        "cold_start_ms": report.round_figure(contender.result_ms),
        "created_ms": report.round_figure(contender.created_ms),
        "detail": contender.detail(),
    }


def _selected(args: argparse.Namespace) -> list[entries.Entry]:
    """The entries the options name, their SDKs checked; a spec's module importable from here."""
    selected = entries.select(args)
    check_extras([e.name for e in selected if e.known])  # a spec loads, or says why, when its run starts
    if any(not e.known for e in selected):
        entries.importable_here()
    return selected


def main(argv: list[str] | None = None) -> int:
    """``python -m conformance.bench``; a wrong option is one line and exit 2, as in hermes-backend-kit."""
    try:
        return run(parser().parse_args(argv))
    except UsageError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    if args.world_only:
        return world_only(args)
    if args.suite_only:
        return suite_only(args)
    if args.network_only:
        return network_only(args)
    selected = _selected(args)
    rtts = _rtts(args)
    by_name = {e.name: e for e in selected}
    backends = list(by_name)
    plan = _plan(args)
    clean_env = dict(os.environ)  # each KitRun exports its fake's variables into this process
    clean = Scope.capture()
    progress = Progress()
    load_before = os.getloadavg()[0]  # the machine is shared: the load goes with the figures
    results: list[TargetResult] = []
    world_figures = _measure_world(args, progress)
    minimal_figures: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="kit-bench-") as tmp:
        local = LocalBash(Path(tmp))
        kits, failed = _start_backends(selected, Path(tmp), progress, clean)
        clients: dict[str, minimal.MinimalClient] = {}
        try:
            clients = _minimal_clients(kits)
            contenders, minimal_contenders = _contenders(local, kits, clients)
            progress(
                "all",
                "cold start",
                f"{plan.cold_samples} interleaved rounds of {len(contenders)} targets "
                f"and {len(minimal_contenders)} minimal clients",
            )
            cold.interleave([*contenders.values(), *minimal_contenders.values()], plan.cold_samples, progress)
            minimal_figures.update({b: _minimal_entry(c) for b, c in minimal_contenders.items() if "+" not in b})
            for name, entry in minimal_figures.items():
                entry["in_host"] = _minimal_entry(minimal_contenders[f"{name}+host"])
                entry["calls"] = _calls(kits[name], clients[name], progress)
            progress("local", "start", "baseline: bash -c through subprocess")
            results.append(measure(local, plan, progress, cold_figure(contenders.get("local"))))
            for name in backends:
                if name in failed:
                    results.append(failed[name])
                    continue
                target, scope = kits.pop(name)
                scope.apply()
                try:
                    if name in clients and name in minimal_figures:
                        minimal_figures[name].update(_minimal_stream(clients[name], plan.stream, progress))
                    results.append(measure(target, plan, progress, cold_figure(contenders.get(name))))
                finally:
                    target.close()
                    clean.apply()
        finally:
            for client in clients.values():
                client.close()
            for target, scope in kits.values():  # left by a failure above: closed all the same
                scope.apply()
                target.close()
            clean.apply()
    results[0].figures["suite_s"] = Figure(na="the baseline is not a backend: there is no suite to run")
    suites: dict[str, dict[str, Any]] = {}
    for r in results[1:]:
        if args.skip_suite:
            r.figures["suite_s"] = Figure(na="skipped (--skip-suite)")
            continue
        suites[r.name] = _measure_suite(by_name[r.name], clean_env, progress)
        r.figures["suite_s"] = Figure(suites[r.name]["wall_s"], detail={"returncode": suites[r.name]["returncode"]})
    options: dict[str, Any] = {
        "quick": args.quick,
        "backends": backends,
        "specs": {e.name: {"fake": e.fake, "live": e.live} for e in selected if not e.known},
        "skip_suite": args.skip_suite,
        "sizes": plan.sizes,
        "stream": plan.stream,
        "stdin": plan.stdin,
        "sync": {"files": plan.sync[0], "file_bytes": plan.sync[1], "big": plan.sync[2]},
        "concurrency": plan.concurrency,
        "per_call": plan.per_call,
        "rounds": plan.rounds,
        "cold_samples": plan.cold_samples,
    }
    data = report.to_json(results, {"stream": plan.stream, "stdin": plan.stdin, "sync": plan.sync}, options)
    data.update(world_figures)
    data["machine"]["load_average_1m"] = {"start": round(load_before, 2), "end": round(os.getloadavg()[0], 2)}
    data["minimal"] = minimal_figures
    data["suite"] = suites
    data["goals"] = goals.evaluate(data, minimal_figures)
    if rtts and any(network.has_network(e) for e in selected):
        data["network"] = _network(selected, rtts, _jitter(args), args.quick, progress)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    markdown = report.to_markdown(data)
    out.with_suffix(".md").write_text(markdown)
    print(markdown)
    progress("all", "done", f"wrote {out} and {out.with_suffix('.md')}")
    return 1 if any(r.error for r in results) else 0
