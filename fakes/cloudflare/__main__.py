"""Serve the bridge fake in the foreground: ``python -m fakes.cloudflare --port N``."""

from __future__ import annotations

import argparse
import shlex
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from .service import start
from .settings import EXTENSIONS, Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fakes.cloudflare", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free port)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the boxes live (default: a temp dir)")
    parser.add_argument("--idle", type=float, default=None, help="IDLE_SECONDS of the idle snapshot")
    parser.add_argument("--heartbeat", type=float, default=None, help="heartbeat interval in seconds")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the conformance suite's short intervals instead of the public Worker's timings",
    )
    parser.add_argument(
        "--extensions",
        default="",
        help=f"protocol extensions to offer: 'all' or a comma list of {', '.join(EXTENSIONS)} "
        "(default: none, a plain v1 Worker)",
    )
    args = parser.parse_args(argv)
    offered = EXTENSIONS if args.extensions == "all" else tuple(e for e in args.extensions.split(",") if e)
    settings = Settings.quick(extensions=offered) if args.quick else Settings(extensions=offered)
    if args.idle is not None:
        settings = replace(settings, idle_s=args.idle)
    if args.heartbeat is not None:
        settings = replace(settings, heartbeat_s=args.heartbeat)
    own_workdir = args.workdir is None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="kit-cloudflare-"))
    service = start(workdir, settings=settings, port=args.port)
    for name, value in service.env.items():
        print(f"export {name}={shlex.quote(value)}")
    print(f"# box paths: {service.world.paths_note}")
    print("# Ctrl-C stops the fake", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
