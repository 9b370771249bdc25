"""Soak: many commands from many threads per backend, then count what leaked.

    python -m conformance.soak [--backends a,b] [--commands 10000] [--threads 8] [--examples 1000]

Each backend runs in its own child process (so RSS, descriptors and children
are that backend's alone, with a private TMPDIR).  In the child:

1. warm up: create the soak's environments once, run a few commands, clean up;
   then take the baseline (fds, descendant processes, boxes by state, files
   under the fake root and TMPDIR, /tmp/hermes* entries);
2. recreate the environments (same task ids: persistent ones resume their
   boxes) and run ``--commands`` commands from ``--threads`` threads, two
   threads per environment.  Every command echoes a unique nonce and exits
   with a code derived from it (some read the nonce from stdin); every result
   is checked, so a lost, failed or crossed result is counted by kind;
3. RSS is sampled every ``--sample-every`` commands (first/last/max, slope
   by least squares in KiB per 1000 commands);
4. clean up, let cleanups finish, count again: leaks are after minus baseline;
5. run the session state machine with ``--examples`` freshly random examples.

The parent writes soak/results.json and prints one table row per backend.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from conformance import backends
from conformance.leftovers import descendants

ENVS = 4  # two persistent, two not; THREADS share them, as Hermes's tools share one environment
LIVE_STATES = ("running", "creating")


# ------------------------------------------------------------------ measurements
def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def file_set(root: Path) -> set[str]:
    out: set[str] = set()
    for dirpath, _dirs, files in os.walk(root):
        out.update(os.path.relpath(os.path.join(dirpath, f), root) for f in files)
    return out


def host_tmp_entries() -> set[str]:
    """What a backend could leave in the shared /tmp despite TMPDIR (hard-coded paths)."""
    with contextlib.suppress(OSError):
        return {n for n in os.listdir("/tmp") if n.startswith(("hermes", ".hermes"))}
    return set()


def _is_session_snapshot(path: str) -> bool:
    """The host's session snapshot (BaseEnvironment writes $TMP/hermes-snap-<session>.sh inside the box).

    A persistent box keeps one per session that used it, as it would in Hermes;
    that is state inside the sandbox, counted separately from host leaks.
    """
    name = os.path.basename(path)
    return name.startswith("hermes-snap-") and name.endswith(".sh")


def slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of (commands, KiB), in KiB per 1000 commands."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if var == 0 else 1000 * sum((x - mx) * (y - my) for x, y in points) / var


# ------------------------------------------------------------------ one backend (child process)
def _snapshot(kit: Any, roots: list[Path]) -> dict[str, Any]:
    boxes = kit.world.sandboxes() if kit.world is not None else {}
    files: set[str] = set()
    for root in roots:
        files |= {f"{root.name}/{f}" for f in file_set(root) if not _is_session_snapshot(f)}
    return {
        "fds": fd_count(),
        "processes": descendants(),
        "boxes": boxes,
        "files": files,
        "host_tmp": host_tmp_entries(),
    }


def _settle(kit: Any, roots: list[Path], baseline: dict[str, Any], limit: float = 20.0) -> dict[str, Any]:
    """Counts after cleanup, waiting (bounded) for asynchronous teardown to finish."""
    end = time.monotonic() + limit
    while True:
        now = _snapshot(kit, roots)
        settled = (
            now["fds"] <= baseline["fds"]
            and len(now["processes"]) <= len(baseline["processes"])
            and not [s for s in now["boxes"].values() if s in LIVE_STATES]
        )
        if settled or time.monotonic() > end:
            return now
        time.sleep(0.2)


def _command(i: int) -> tuple[str, str, int, str | None]:
    """(command, nonce, expected rc, stdin) for command number i."""
    nonce = f"soak-{i}-{uuid.uuid4().hex}"
    code = int(hashlib.sha256(nonce.encode()).hexdigest(), 16) % 4
    if i % 3 == 0:
        return f"cat; (exit {code})", nonce, code, nonce + "\n"
    return f"printf '%s\\n' {nonce}; (exit {code})", nonce, code, None


def soak_backend(
    backend: str, commands: int, threads: int, sample_every: int, examples: int, workdir: Path
) -> dict[str, Any]:
    from conformance.host.drivers import run
    from conformance.session_model import Harness, SessionMachine, regression_json, run_machine

    harness = Harness(backend, workdir / "kit")
    kit = harness.kit
    roots = [workdir / "kit", Path(tempfile.gettempdir())]
    task_ids = [(f"kit-soak-{n}", n % 2 == 0) for n in range(ENVS)]
    result: dict[str, Any] = {"backend": backend, "commands": commands, "threads": threads}
    with harness.active():
        # Warm-up: the same task ids, so persistent boxes exist before the baseline and are resumed later.
        for task_id, persistent in task_ids:
            env = kit.create(task_id, persistent=persistent, track=False)
            for i in range(5):
                cmd, _, _, stdin = _command(i)
                run(env, cmd, timeout=30, stdin_data=stdin)
            env.cleanup()
        baseline = _settle(kit, roots, _snapshot(kit, roots), limit=5)

        envs = [kit.create(t, persistent=p, track=False) for t, p in task_ids]
        counts: Counter[str] = Counter()
        failures: list[str] = []
        samples: list[tuple[int, int]] = [(0, rss_kib())]
        done = 0
        lock = threading.Lock()
        started = time.monotonic()

        def worker(index: int) -> None:
            nonlocal done
            env = envs[index % ENVS]
            for i in range(index, commands, threads):
                cmd, nonce, code, stdin = _command(i)
                try:
                    res = run(env, cmd, timeout=60, stdin_data=stdin)
                except Exception as exc:
                    kind, detail = "lost", f"{type(exc).__name__}: {exc}"
                else:
                    output, rc = res.get("output", ""), int(res.get("returncode", 0) or 0)
                    if output.strip() == nonce and rc == code:
                        kind, detail = "ok", ""
                    elif "soak-" in output and nonce not in output:
                        kind, detail = "mixed", output[:200]
                    elif output.strip() != nonce:
                        kind, detail = "wrong_output", output[:200]
                    else:
                        kind, detail = "wrong_returncode", f"{rc} != {code}"
                with lock:
                    counts[kind] += 1
                    if detail and len(failures) < 20:
                        failures.append(f"#{i} {kind}: {detail}")
                    done += 1
                    if done % sample_every == 0:
                        samples.append((done, rss_kib()))

        pool = [threading.Thread(target=worker, args=(n,), name=f"soak-{n}") for n in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.monotonic() - started
        samples.append((done, rss_kib()))

        for env in envs:
            env.cleanup()
            waiter = getattr(env, "wait_for_cleanup", None)
            if callable(waiter):
                waiter(timeout=15)
        envs.clear()
        after = _settle(kit, roots, baseline)

    rss = [kib for _, kib in samples]
    new_boxes = {b: s for b, s in after["boxes"].items() if b not in baseline["boxes"] and s != "deleted"}
    result.update(
        {
            "seconds": round(elapsed, 1),
            "commands_per_s": round(commands / elapsed, 1) if elapsed else None,
            "results": dict(counts),
            "checked": sum(counts.values()),
            "failures": failures,
            # The second half's slope is the one that says "flat": the first includes warming caches.
            "rss_kib": {
                "first": rss[0],
                "last": rss[-1],
                "max": max(rss),
                "slope_kib_per_1000": round(slope(samples), 1),
                "slope_second_half_kib_per_1000": round(slope(samples[len(samples) // 2 :]), 1),
                "samples": len(samples),
            },
            "leaks": {
                "fds": {"before": baseline["fds"], "after": after["fds"]},
                "processes": {"before": len(baseline["processes"]), "after": len(after["processes"])},
                "boxes": {
                    "before": Counter(baseline["boxes"].values()),
                    "after": Counter(after["boxes"].values()),
                    "new": new_boxes,
                    "live_after": sorted(b for b, s in after["boxes"].items() if s in LIVE_STATES),
                },
                "files": {
                    "before": len(baseline["files"]),
                    "after": len(after["files"]),
                    "new": sorted(after["files"] - baseline["files"])[:20],
                },
                "host_tmp": {"new": sorted(after["host_tmp"] - baseline["host_tmp"])},
            },
            "session_snapshots_in_boxes": sum(1 for root in roots for f in file_set(root) if _is_session_snapshot(f)),
        }
    )
    result["leaked"] = _leaked(result["leaks"])

    machine: dict[str, Any] = {"examples": examples}
    if examples:
        started = time.monotonic()
        try:
            run_machine(harness, examples, steps=10, seed=None)
            machine["failed"] = None
        except Exception as exc:
            machine["failed"] = str(exc)[:2000]
            machine["regression"] = json.loads(regression_json(backend, SessionMachine.last_trace))
        machine["seconds"] = round(time.monotonic() - started, 1)
        machine["steps"] = dict(harness.steps)
    result["machine"] = machine
    harness.close()
    return result


def _leaked(leaks: dict[str, Any]) -> list[str]:
    """What counts as leaked: more fds, processes, files or live boxes than before; new boxes not deleted."""
    found = []
    for name in ("fds", "processes", "files"):
        if leaks[name]["after"] > leaks[name]["before"]:
            found.append(f"{name}: {leaks[name]['before']} -> {leaks[name]['after']}")
    if leaks["boxes"]["live_after"]:
        found.append(f"boxes still live: {leaks['boxes']['live_after']}")
    if leaks["boxes"]["new"]:
        found.append(f"new boxes kept: {leaks['boxes']['new']}")
    if leaks["host_tmp"]["new"]:
        found.append(f"/tmp entries: {leaks['host_tmp']['new']}")
    return found


# ------------------------------------------------------------------ parent: one child per backend
def _table(results: list[dict[str, Any]]) -> str:
    head = (
        "backend",
        "cmds",
        "thr",
        "s",
        "ok",
        "lost",
        "mixed",
        "wrong",
        "fds",
        "procs",
        "boxes live",
        "rss first/last/max MiB",
        "slope KiB/1k (2nd half)",
        "leaked",
        "machine",
    )
    rows = [head]
    for r in results:
        if "error" in r:
            rows.append((r["backend"], "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "ERROR"))
            continue
        res, lk, rss, m = r["results"], r["leaks"], r["rss_kib"], r["machine"]
        rows.append(
            (
                r["backend"],
                str(r["commands"]),
                str(r["threads"]),
                str(r["seconds"]),
                str(res.get("ok", 0)),
                str(res.get("lost", 0)),
                str(res.get("mixed", 0)),
                str(res.get("wrong_output", 0) + res.get("wrong_returncode", 0)),
                f"{lk['fds']['before']}->{lk['fds']['after']}",
                f"{lk['processes']['before']}->{lk['processes']['after']}",
                str(len(lk["boxes"]["live_after"])),
                "/".join(f"{rss[k] / 1024:.0f}" for k in ("first", "last", "max")),
                f"{rss['slope_kib_per_1000']} ({rss['slope_second_half_kib_per_1000']})",
                "none" if not r["leaked"] else "YES",
                f"{m['examples']} ex {'ok' if not m.get('failed') else 'FAILED'} {m.get('seconds', 0)}s",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(backends.REFERENCE_BACKENDS))
    parser.add_argument("--commands", type=int, default=int(os.environ.get("KIT_SOAK_COMMANDS", "10000")))
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument(
        "--examples",
        type=int,
        default=int(os.environ.get("KIT_SOAK_EXAMPLES", "1000")),
        help="random session-machine examples per backend (0: none)",
    )
    parser.add_argument("--sample-every", type=int, default=250)
    parser.add_argument("--out", default="soak/results.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one backend, print JSON
    args = parser.parse_args(argv)

    if args.one:
        workdir = Path(os.environ["KIT_SOAK_WORKDIR"])
        result = soak_backend(args.one, args.commands, args.threads, args.sample_every, args.examples, workdir)
        print("KIT-SOAK-RESULT " + json.dumps(result, default=sorted))
        return 0

    results = []
    for backend in [b for b in args.backends.split(",") if b]:
        with tempfile.TemporaryDirectory(prefix=f"kit-soak-{backend}-") as tmp:
            (Path(tmp) / "tmp").mkdir()
            env = {**os.environ, "TMPDIR": str(Path(tmp) / "tmp"), "KIT_SOAK_WORKDIR": tmp}
            cmd = [
                sys.executable,
                "-W",
                "ignore::DeprecationWarning",
                "-m",
                "conformance.soak",
                "--one",
                backend,
                "--commands",
                str(args.commands),
                "--threads",
                str(args.threads),
                "--examples",
                str(args.examples),
                "--sample-every",
                str(args.sample_every),
            ]
            print(
                f"soak: {backend}: {args.commands} commands from {args.threads} threads, "
                f"{args.examples} machine examples",
                flush=True,
            )
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("KIT-SOAK-RESULT ")), None)
            if line is None:
                results.append({"backend": backend, "error": (proc.stdout + proc.stderr)[-4000:]})
                traceback.print_exc()
                print(proc.stderr[-4000:], file=sys.stderr)
            else:
                results.append(json.loads(line.split(" ", 1)[1]))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results},
            indent=2,
            default=sorted,
        )
        + "\n"
    )
    print(_table(results))
    print(f"written: {out}")
    bad = [
        r
        for r in results
        if "error" in r
        or r["leaked"]
        or r["checked"] != r["commands"]
        or r["results"].get("ok", 0) != r["commands"]
        or r["machine"].get("failed")
    ]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
