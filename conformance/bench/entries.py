"""Which backends a bench run measures: names the kit knows, or any backend spec beside a reference.

A known name (conformance/backends.py) runs on its own fake.  Any other spec
``certify --backend`` takes (a plugin directory, ``ep:NAME``,
``package.module:attr``) is measured beside a reference backend the kit
knows, on the reference's fake unless told another (``--fake``) or the real
service (``--live``), with the same figures, so its row reads against the
reference's row and both against the baseline.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.backends import DEFAULT_BACKENDS, KNOWN_BACKENDS, KnownBackend
from conformance.errors import UsageError

DEFAULT_REFERENCE = "tempdir_box"
SPEC_WORKERS = KnownBackend.workers  # certify's own default


@dataclass(frozen=True)
class Entry:
    """One row of the matrix: what KitRun loads, on which fake, and how certify is run for its suite figure."""

    name: str  # the row's name in results.json and results.md
    spec: str  # what --backend names
    description: str
    workers: int
    known: bool = True
    fake: str | None = None  # a spec entry's fake (None with live)
    live: bool = False
    backend_config: str | None = None

    def run_options(self) -> Any:
        from conformance.run import RunOptions

        if self.known:
            return RunOptions(backend=self.spec)
        return RunOptions(backend=self.spec, fake=self.fake, live=self.live, backend_config=self.backend_config)

    def certify_args(self) -> list[str]:
        """What certify needs beyond ``--backend``: the fake, --live, --backend-config."""
        if self.known:
            return []
        args = ["--live"] if self.live else (["--fake", self.fake] if self.fake else [])
        return args + (["--backend-config", self.backend_config] if self.backend_config else [])

    @property
    def directory(self) -> str:
        """A directory name for the entry's run (a spec may hold slashes and colons)."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", self.name).strip("_.") or "backend"


def known(name: str) -> Entry:
    if name not in KNOWN_BACKENDS:
        raise UsageError(
            f"bench: unknown backend {name!r} (known: {', '.join(KNOWN_BACKENDS)})",
            "name known backends in --backends and --reference; bench any other with --backend SPEC",
        )
    backend = KNOWN_BACKENDS[name]
    return Entry(name, name, backend.description, backend.workers)


def select(args: Any) -> list[Entry]:
    """The entries the options name: ``--backends`` (known names), or ``--backend SPEC`` after its reference."""
    if args.backend is None:
        if args.reference is not None or args.fake or args.live or args.backend_config:
            raise UsageError(
                "bench: --reference, --fake, --live and --backend-config go with --backend SPEC",
                "add --backend SPEC, or drop them: the backends of --backends each run on their own fake",
            )
        names = args.backends.split(",") if args.backends else list(DEFAULT_BACKENDS)
        return [known(n.strip()) for n in names if n.strip()]
    if args.backends:
        raise UsageError(
            "bench: --backend SPEC and --backends exclude each other",
            "pass --backend SPEC (with --reference NAME) or --backends a,b",
        )
    if args.fake and args.live:
        raise UsageError("bench: --fake and --live exclude each other", "pick one")
    reference = known(args.reference or DEFAULT_REFERENCE)
    fake = None if args.live else (args.fake or KNOWN_BACKENDS[reference.name].fake)
    spec = str(args.backend).strip()
    if not spec:
        raise UsageError("bench: --backend is empty", "name a plugin directory, ep:NAME or package.module:attr")
    if spec in KNOWN_BACKENDS:
        other = known(spec)
        return [reference] if other == reference else [reference, other]
    name = spec  # as given: the row's name reads the same on every machine
    if Path(spec).expanduser().is_dir():  # its suite runs certify elsewhere: an absolute path loads there too
        spec = str(Path(spec).expanduser().resolve())
    config = str(Path(args.backend_config).resolve()) if args.backend_config else None
    where = "its real service" if args.live else f"fake {fake}" if fake else "no fake"
    entry = Entry(
        name, spec, f"{name} on {where}", SPEC_WORKERS, known=False, fake=fake, live=args.live, backend_config=config
    )
    if entry.name == reference.name:
        raise UsageError(f"bench: --backend {spec} is the reference itself", "pick another --reference")
    return [reference, entry]


def importable_here() -> None:
    """A package.module:attr spec next to the caller imports, in this process and in certify's (as certify
    makes it: the caller's directory on the path)."""
    import sys

    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *paths])
