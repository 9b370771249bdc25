"""The bench's options, shared by ``python -m conformance.bench`` and ``hermes-backend-kit bench``
(conformance/bench/command.py), kept apart from cli.py: building hermes-backend-kit's parser imports none
of the measuring code."""

from __future__ import annotations

import argparse

from conformance.backends import DEFAULT_BACKENDS
from conformance.bench.entries import DEFAULT_REFERENCE
from conformance.bench.world import DEFAULT_ROUNDS as DEFAULT_WORLD_ROUNDS

DESCRIPTION = "Benchmark matrix: backends on their fakes against local bash -c (docs/benchmarks.md)."


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--backends",
        default=None,
        help=f"comma-separated backends the kit knows (default {','.join(DEFAULT_BACKENDS)})",
    )
    p.add_argument(
        "--backend",
        metavar="SPEC",
        help="bench any backend certify takes (a plugin directory, ep:NAME, package.module:attr) beside "
        "--reference on the reference's fake, with the same figures (instead of --backends)",
    )
    p.add_argument(
        "--reference",
        metavar="NAME",
        help=f"the known backend --backend SPEC is measured beside (default {DEFAULT_REFERENCE})",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--fake", help="the fake --backend SPEC runs against (default: the reference's)")
    mode.add_argument(
        "--live", action="store_true", help="--backend SPEC against its real service (the reference on its fake)"
    )
    p.add_argument("--backend-config", metavar="FILE", help="--backend-config for --backend SPEC, as certify takes it")
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds (about a minute)")
    p.add_argument("--skip-suite", action="store_true", help="do not certify (no suite figures)")
    p.add_argument(
        "--suite-only",
        action="store_true",
        help="only certify the backends, measured, and update the 'suite' key of --out (and its .md)",
    )
    p.add_argument("--out", default="bench/results.json", help="JSON path; the Markdown goes next to it (.md)")
    p.add_argument("--sizes", help="output sizes of the growth series, e.g. 1K,16K,256K,4M,64M,100M")
    p.add_argument("--stream-size", help="output size of the throughput figures (default 100M; quick 4M)")
    p.add_argument("--stdin-size", help="stdin size (default 50M; quick 4M)")
    p.add_argument("--sync-files", type=int, help="small files to sync (default 1000; quick 100)")
    p.add_argument("--sync-big-size", help="size of the one big synced file (default 50M; quick 4M)")
    p.add_argument("--concurrency", help="concurrent execute() calls, e.g. 1,2,4,8,16")
    p.add_argument("--per-call-size", help="output per concurrent call (default 4M; quick 256K)")
    p.add_argument("--rounds", type=int, help="round trips of `true` (default 50; quick 10)")
    p.add_argument(
        "--cold-samples",
        type=int,
        help="interleaved rounds of cold starts, one per target and minimal client each (default 9; quick 5)",
    )
    p.add_argument(
        "--rtt",
        metavar="MS[,MS...]",
        help="round-trip times between the host and each vendor fake, e.g. 0,20,50: the network section "
        "(cold start, warm commands, a session, file sync, execute_code, with the calls each made) beside "
        "the vendor's minimal client in the host (default: 50 in a full run, none with --quick)",
    )
    p.add_argument(
        "--jitter",
        metavar="MS",
        type=float,
        help="up to this much more on each crossing of the network, at random (default: a tenth of each --rtt)",
    )
    p.add_argument(
        "--network-only",
        action="store_true",
        help="measure only the network section (--rtt, default 50) and update the 'network' key of --out (and its .md)",
    )
    p.add_argument(
        "--world-rounds",
        type=int,
        default=DEFAULT_WORLD_ROUNDS,
        help=f"samples of the box world's spawn-to-exit figure (default {DEFAULT_WORLD_ROUNDS})",
    )
    p.add_argument(
        "--world-only",
        action="store_true",
        help="measure only the box world figure and update the 'world' key of --out (and its .md)",
    )
