"""Backends the kit knows by name: what each loads, the fake it runs against and the extra it needs.

The one list of them: the CLI, ``--backend``, noxfile.py, the bench, the soak
and the kit's tests all read it here.  noxfile.py imports this module from the
nox process before the project is installed anywhere, so it imports the
standard library only (``import conformance`` runs nothing else either).
"""

from __future__ import annotations

import importlib.util
import shutil
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownBackend:
    name: str
    spec: str  # what conformance.host.loader loads
    fake: str | None  # the fake service used unless --live
    description: str
    extra: str | None = None  # the pip extra that installs its vendor SDK
    sdk_module: str | None = None  # the module that extra makes importable
    reference: bool = True  # a reference backend (reference/), not the kit's own tempdir_box
    service: bool = True  # its sandboxes are a vendor service's, reached over its protocol (False: on this machine)
    workers: int = 3  # pytest-xdist workers of its certify runs (certify's default, the bench): bench/PROFILE.md
    # Programs its boxes take from this machine (Debian packages of the same name); without one each box
    # installs its own from the network.
    host_programs: tuple[str, ...] = ()

    def missing_extra(self) -> str | None:
        """Why this backend cannot load here (its SDK is not importable, and how to install it); None if it can."""
        if self.sdk_module is None or importlib.util.find_spec(self.sdk_module) is not None:
            return None
        return (
            f"backend {self.name} needs its SDK, the '{self.extra}' extra: module {self.sdk_module!r} is not "
            f"importable. Install it with: pip install 'hermes-backend-kit[{self.extra}]'"
        )

    def slow_here(self) -> str | None:
        """Why this backend's boxes start slowly on this machine (a program they take from it is missing,
        and how to install it); None when nothing is missing."""
        missing = [name for name in self.host_programs if shutil.which(name) is None]
        if not missing:
            return None
        names = " and ".join(missing)
        return (
            f"note: this machine has no {names}, which {self.name}'s boxes take from it: each new box installs "
            f"its own from the network (seconds a box, minutes for a certify). Install it to certify in "
            f"seconds: apt-get install {' '.join(missing)}"
        )


KNOWN_BACKENDS: dict[str, KnownBackend] = {
    "tempdir_box": KnownBackend(
        "tempdir_box",
        "fakes.tempdir_box",
        "tempdir",
        "temp-dir boxes on this machine (the kit's default system under test)",
        reference=False,
        service=False,
    ),
    "upstash_box": KnownBackend(
        "upstash_box",
        "reference.upstash_box",
        "upstash",
        "reference Upstash Box backend",
        extra="upstash",
        sdk_module="upstash_box",
    ),
    "cloudflare_sandbox": KnownBackend(
        "cloudflare_sandbox",
        "reference.cloudflare_sandbox",
        "cloudflare",
        "reference Cloudflare Sandbox backend (bridge protocol v1 and its extensions)",
    ),
    "deepinfra": KnownBackend(
        "deepinfra",
        "reference.deepinfra",
        "deepinfra",
        "reference DeepInfra sandbox backend",
        extra="deepinfra",
        sdk_module="deepinfra",
    ),
    "box_lite": KnownBackend(
        "box_lite",
        "reference.box_lite",
        "box_lite",
        "reference Box Lite backend (isolated local boxes; the world is its box manager's home)",
        service=False,
        host_programs=("sudo",),  # the agent's sudo in a box over the host base
    ),
}
DEFAULT_BACKEND = "tempdir_box"
# What `nox -s conformance` certifies and the bench measures unless told otherwise: every known backend.
DEFAULT_BACKENDS: tuple[str, ...] = tuple(KNOWN_BACKENDS)
REFERENCE_BACKENDS: tuple[str, ...] = tuple(n for n, b in KNOWN_BACKENDS.items() if b.reference)
# The reference backends of a vendor service: a wire protocol, a minimal client, transport faults.
SERVICE_BACKENDS: tuple[str, ...] = tuple(n for n in REFERENCE_BACKENDS if KNOWN_BACKENDS[n].service)
# The extras that install every known backend's SDK, as pip spells them: ".[upstash,deepinfra]".
EXTRAS: tuple[str, ...] = tuple(dict.fromkeys(b.extra for b in KNOWN_BACKENDS.values() if b.extra))


# hermes-agent's own built-in environments (conformance.hermes_builtins): ``hermes:local``, ``hermes:ssh``.
HERMES_BUILTIN_PREFIX = "hermes:"
HERMES_BUILTINS: tuple[str, ...] = ("local", "ssh")


def resolve(spec: str) -> tuple[str, str | None]:
    """Return (loader spec, default fake) for a --backend value.

    ``hermes:KIND`` names a built-in environment of the installed hermes-agent; it has no fake (the
    local one runs on this machine, the SSH one on the server --backend-config names).
    """
    known = KNOWN_BACKENDS.get(spec)
    if known is not None:
        return known.spec, known.fake
    if spec.startswith(HERMES_BUILTIN_PREFIX):
        from conformance.errors import BackendLoadError  # the standard library only, as this module

        kind = spec[len(HERMES_BUILTIN_PREFIX) :]
        if kind not in HERMES_BUILTINS:
            raise BackendLoadError(
                f"--backend {spec}: hermes-agent has no built-in environment {kind!r} the kit certifies",
                f"use one of {', '.join(HERMES_BUILTIN_PREFIX + k for k in HERMES_BUILTINS)}",
            )
        if importlib.util.find_spec("hermes_cli") is None:
            raise BackendLoadError(
                f"--backend {spec} certifies hermes-agent's own {kind} environment, but hermes-agent is not installed",
                "install it with: pip install 'hermes-backend-kit[hermes]' (and run with --host hermes)",
            )
    return spec, None
