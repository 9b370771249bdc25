"""The ``init-plugin`` subcommand of ``hermes-backend-kit``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from conformance.scaffold import TEMPLATES, generate


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "init-plugin",
        help="write a new Hermes backend plugin package that certifies as written",
        description="Write a complete, installable Hermes terminal backend plugin: pyproject.toml with the "
        "hermes_agent.plugins entry point, plugin.yaml, register(ctx), a provider and an environment, "
        "a README, a GitHub Actions workflow that certifies it and a waivers example.  Lines you "
        "must change are marked '# VENDOR:'.",
    )
    p.add_argument("name", help="package, entry point and backend name: a lowercase Python identifier (acme_cloud)")
    p.add_argument(
        "--dir", dest="directory", metavar="D", help="where to write it (default ./NAME); must be new or empty"
    )
    p.add_argument(
        "--template",
        choices=TEMPLATES,
        default="local",
        help="local: commands run in a per-task directory on this machine; http: a skeleton for a "
        "vendor REST service, with a loopback service for its own tests (default local)",
    )
    p.set_defaults(func=cmd_init_plugin)


def cmd_init_plugin(args: argparse.Namespace) -> int:
    written = generate(args.name, args.directory, args.template)  # a ScaffoldError is printed by the CLI
    root = Path(args.directory or args.name)
    print(f"wrote {len(written)} files to {root}/ ({args.template} template):")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(f"next: read {root}/README.md; lines to change are marked '# VENDOR:' (grep -rn 'VENDOR:' {root})")
    return 0
