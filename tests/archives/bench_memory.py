"""Peak memory of writing, verifying and extracting a large archive (a benchmark, not a test).

    python -m tests.archives.bench_memory --gib 1 [--dir DIR] [--ops write,verify,extract,payload]

Builds a tree of about ``--gib`` GiB under a temporary directory (half random data, half
sparse-ish files that are mostly holes, in files of 1-256 MiB plus a thousand small ones),
then runs each operation in a fresh child process and prints that process's peak resident set
(``ru_maxrss``) and the peak of the gpg it ran, with the elapsed time.  Memory must stay flat
whatever the size: run it at two sizes and compare.  Timings depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MiB = 1024 * 1024


def build_tree(root: Path, total: int) -> int:
    """Files adding up to ``total`` bytes: random ones and sparse ones, and many small ones."""
    written = 0
    (root / "small").mkdir(parents=True)
    for i in range(1000):
        (root / "small" / f"f{i:04d}").write_bytes(os.urandom(1024))
        written += 1024
    sizes = [256, 128, 64, 32, 16, 8, 4, 2, 1]
    index = 0
    while written < total:
        size = min(sizes[index % len(sizes)] * MiB, total - written)
        path = root / f"big{index:03d}"
        with open(path, "wb") as out:
            if index % 2 == 0:
                left = size
                while left:
                    chunk = os.urandom(min(8 * MiB, left))
                    out.write(chunk)
                    left -= len(chunk)
            else:  # sparse-ish: a random MiB at the start, the rest a hole
                out.write(os.urandom(min(MiB, size)))
                out.truncate(size)
        written += size
        index += 1
    return written


def child(op: str, tree: str, archive: str, dest: str) -> None:
    """One operation in this (fresh) process; prints a JSON line with its peak memory."""
    import archives

    secret = archives.Passphrase("bench passphrase")
    start = time.monotonic()
    if op == "write":
        archives.write_tree(Path(tree), Path(archive), kind="box", name="bench", passphrase=secret)
    elif op == "verify":
        archives.verify(Path(archive), secret)
    elif op == "extract":
        archives.extract(Path(archive), Path(dest), secret)
    elif op == "payload":
        with archives.open_payload(Path(archive), secret, kind=None) as payload:
            for _chunk in payload.chunks():
                pass
    elapsed = time.monotonic() - start
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    gpg = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps({"op": op, "python_kib": me, "gpg_kib": gpg, "seconds": round(elapsed, 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--dir", default=None, help="where the tree, archive and extraction go (default: TMPDIR)")
    parser.add_argument("--ops", default="write,verify,extract,payload", help="which operations, comma-separated")
    parser.add_argument("--child", nargs=4, metavar=("OP", "TREE", "ARCHIVE", "DEST"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    base = Path(tempfile.mkdtemp(prefix="archive-bench-", dir=args.dir))
    try:
        tree, archive, dest = base / "tree", base / "bench.tar.gz.gpg", base / "restored"
        size = build_tree(tree, int(args.gib * 1024 * MiB))
        print(f"tree: {size / MiB:.0f} MiB ({args.gib} GiB requested) under {base}")
        for op in args.ops.split(","):
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tests.archives.bench_memory",
                    "--child",
                    op,
                    str(tree),
                    str(archive),
                    str(dest),
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            result = json.loads(out.strip().splitlines()[-1])
            extra = f", archive {archive.stat().st_size / MiB:.0f} MiB" if op == "write" else ""
            print(
                f"{op:8s} peak RSS python {result['python_kib'] / 1024:6.1f} MiB, "
                f"gpg {result['gpg_kib'] / 1024:5.1f} MiB, {result['seconds']:6.1f} s{extra}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
