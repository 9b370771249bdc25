"""Profile one benchmark path of one backend, and summarise a py-spy profile of it.

    py-spy record --subprocesses --format raw --rate 200 -o prof.txt -- \\
        python -m conformance.bench.profile run --backend deepinfra --path output --size 100M
    python -m conformance.bench.profile summary prof.txt
    python -m conformance.bench.profile flame --backend upstash_box --out bench/flame-upstash_box.svg

``--path cold`` repeats the cold start (create to the first result, then the
release); ``cold-minimal`` the vendor's minimal client (minimal.py) on the same fake.

py-spy samples every thread, which matters here: the backend's readers and
the host's drain thread run in their own threads of this process, and the
fake's event loop in the fake's own process, which ``--subprocesses`` adds
(pyinstrument follows only the calling thread, so it sees nothing but the
host's wait loop).  The summary is self time per
function and inclusive time per source area (reference/, fakes/, host, SDK),
and with ``--subprocesses`` the share of each process (client, fake server,
box world).  ``run`` itself prints the CPU seconds each of them spent on the
path (cpu.py), which bound the throughput each side allows.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
import time
from pathlib import Path

from conformance.bench.measure import MIB, parse_size

PATHS = ("output", "output-full", "rtt", "stdin", "cold", "cold-minimal")
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
# py-spy shortens paths to the module's own: "reference/...", "httpcore/...", "threading.py".
HOST_FILES = ("standins/", "conformance/", "factory.py", "calls.py", "drivers.py")


def area(file: str) -> str:
    if file.startswith("reference/"):
        return "reference backend"
    if file.startswith("fakes/"):
        return "fake service"
    if file.startswith(HOST_FILES):
        return "kit and Hermes host stand-ins"
    top = file.split("/", 1)[0].removesuffix(".py")
    if file.startswith("<frozen") or top in sys.stdlib_module_names:
        return "stdlib"
    return "third-party (SDKs, httpx, websockets, uvicorn)"


def run_path(backend: str, path: str, size: int, repeat: int) -> None:
    from conformance.bench import cpu, minimal
    from conformance.bench.targets import KitBackend

    with tempfile.TemporaryDirectory(prefix="kit-profile-") as tmp:
        target = KitBackend(backend, Path(tmp))
        try:
            target.round_trip()  # warm: environment created outside the measured loop
            data = ("y" * 1023 + "\n") * (size // 1024) if path == "stdin" else ""
            client = minimal.for_backend(backend, dict(target.run.fake.env)) if path == "cold-minimal" else None
            if path == "cold-minimal" and client is None:
                raise SystemExit(f"{backend} has no minimal client (known: {', '.join(minimal.MINIMAL_CLIENTS)})")
            fake_pid = getattr(target.run.fake, "pid", None)
            before = cpu.snapshot(fake_pid)
            started = time.perf_counter()
            for _ in range(repeat):
                if path == "cold":
                    target.cold_start()
                elif client is not None:
                    client.cold_start()
                elif path == "rtt":
                    target.round_trip()
                elif path == "stdin":
                    target.stdin(data)
                else:
                    target.flood(size, bounded=path == "output")
            elapsed = time.perf_counter() - started
            used = cpu.spent(before, cpu.snapshot(fake_pid))
        finally:
            target.close()
    per = elapsed / repeat
    streams = path in ("output", "output-full", "stdin")
    rate = f", {size / MIB / per:.1f} MiB/s" if streams else ""
    print(f"{backend} {path}: {per * 1000:.1f} ms per call{rate} ({repeat} calls)")
    print("\n".join(cpu.report(used, elapsed, size * repeat / MIB if streams else 0.0)))


_PROCESS = re.compile(r'^process (?P<pid>\d+):"(?P<cmd>.*)"$')


def process_role(frame: str) -> str | None:
    """For py-spy --subprocesses, whose process a stack is: the client (this kit process: host and
    backend), the fake's own process, or a box's init process (the box world, fakes/world.py);
    None when the frame names no process.  A child's stack starts with its parents' process frames:
    the innermost one is the stack's process."""
    m = _PROCESS.match(frame.strip())
    if m is None:
        return None
    cmd = m.group("cmd")
    if "box_init" in cmd:
        return "box init processes (the fake's box world)"
    if "fakes.process" in cmd or "fake serve" in cmd:
        return "fake process (server)"
    if "conformance" in cmd:
        return "client process (kit, host, backend)"
    return f"other process ({cmd[:40]})"


def _frame_key(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame.strip())
    return (m.group("func"), m.group("file")) if m else (frame.strip(), "")


def summarize(profile: Path, top: int = 25, only: str | None = None) -> str:
    """Self time per function and inclusive time per area; ``only``: just the stacks of the processes
    whose role (``process_role``) contains it, e.g. "client" or "fake"."""
    self_time: collections.Counter[str] = collections.Counter()
    areas: collections.Counter[str] = collections.Counter()
    processes: collections.Counter[str] = collections.Counter()
    total = 0
    for line in profile.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        raw = [f for f in stack.split(";") if f]
        role = None
        while raw and (named := process_role(raw[0])) is not None:
            role, raw = named, raw[1:]
        if only is not None and (role is None or only not in role):
            total -= n
            continue
        if role is not None:
            processes[role] += n
        if not raw:
            continue
        frames = [_frame_key(f) for f in raw]
        func, file = frames[-1]
        self_time[f"{func} ({_short(file)})"] += n
        # threading/runpy sit under every stack: stdlib counts only where nothing else is.
        for name in ({area(f) for _, f in frames} - {"stdlib"}) or {"stdlib only"}:
            areas[name] += n
    if total <= 0:
        return "no samples" + (f" of a process whose role contains {only!r}" if only else "")
    lines = [
        f"{total} samples (threads py-spy saw as active; blocked Condition.wait/select calls can still appear)",
        "",
    ]
    if processes:
        lines += ["by process (py-spy --subprocesses):"]
        lines += [f"  {100 * n / total:5.1f}%  {role}" for role, n in processes.most_common()]
        lines += [""]
    lines += ["inclusive by area (a stack counts once per area it passes through):"]
    lines += [f"  {100 * n / total:5.1f}%  {area}" for area, n in areas.most_common()]
    lines += ["", f"self time, top {top}:"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in self_time.most_common(top)]
    return "\n".join(lines)


def flame(backend: str, out: Path, rate: int) -> int:
    """``certify --backend B`` under ``py-spy record --gil --subprocesses``: a flame graph of the whole run.

    ``--gil`` keeps the samples of threads holding the GIL, the Python work: a thread waiting on a socket,
    a lock or a child is not drawn (py-spy's own idle test misreads processes in another PID namespace,
    the box world's, and would draw their waiting as work).  Time in system calls and C code that
    releases the GIL is not in the graph: the suite figures of ``nox -s bench`` hold each process
    kind's whole CPU.
    """
    import shutil
    import subprocess

    beside = Path(sys.executable).with_name("py-spy")  # this interpreter's virtualenv, even when not on PATH
    spy = str(beside) if beside.exists() else shutil.which("py-spy")
    if spy is None:
        print("py-spy is not installed: pip install py-spy (nox -s bench installs it)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="kit-flame-") as tmp:
        certify = [sys.executable, "-m", "conformance.cli", "certify", "--backend", backend, "--out", tmp]
        cmd = [spy, "record", "--gil", "--subprocesses", "--rate", str(rate), "--format", "flamegraph"]
        done = subprocess.run([*cmd, "-o", str(out), "--", *certify], cwd=tmp, check=False)
    print(f"wrote {out}" if out.exists() else "no flame graph was written", file=sys.stderr)
    return done.returncode


def _short(file: str) -> str:
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m conformance.bench.profile")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run one path in a loop (under a profiler)")
    r.add_argument("--backend", required=True)
    r.add_argument("--path", choices=PATHS, default="output")
    r.add_argument("--size", default="100M")
    r.add_argument("--repeat", type=int, default=2)
    f = sub.add_parser("flame", help="a flame graph (SVG) of one certify, every process of it (py-spy)")
    f.add_argument("--backend", required=True)
    f.add_argument("--out", type=Path, required=True, help="the SVG to write, e.g. bench/flame-upstash_box.svg")
    f.add_argument("--rate", type=int, default=100, help="samples a second per thread (default 100)")
    s = sub.add_parser("summary", help="summarise a py-spy --format raw profile")
    s.add_argument("profile", type=Path)
    s.add_argument("--top", type=int, default=25)
    s.add_argument("--only", help="only the processes whose role contains this: client, fake, box")
    args = p.parse_args(argv)
    if args.cmd == "run":
        run_path(args.backend, args.path, parse_size(args.size), args.repeat)
    elif args.cmd == "flame":
        return flame(args.backend, args.out, args.rate)
    else:
        print(summarize(args.profile, args.top, args.only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
