"""Start a fake vendor service for a run: the variables to export and its world.

Each fake exports the vendor's own environment variables (base URL, key),
so unmodified plugins and SDKs talk to it, and exposes a world object through
which checks inspect and disturb sandboxes behind the backend's back.

``start`` runs the fake's server in this process (uvicorn in a thread): the
kit's own tests of the fakes use it.  Suite runs start each fake in its own
process instead (fakes/process.py), with these same factories on the other
side, so nothing a backend does in the kit's interpreter can stall a fake.

Two profiles: ``suite`` (what the kit's own runs use: sandbox caps lifted,
instant state changes, short intervals, every protocol extension) and
``vendor`` (the real service's documented limits and timings; what
``hermes-backend-kit fake serve`` runs unless told otherwise).
``max_sandboxes`` sets the per-account sandbox cap of either.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from fakes.fake_service import FakeService

PROFILES = ("suite", "vendor")
MAX_RTT_MS = 10_000
# A suite run keeps many paused or stopped persistent sandboxes: the cap of the suite profile.
SUITE_MAX_SANDBOXES = 10_000


class UnknownFake(ValueError):
    """--fake names a service the kit does not have."""


class FakeError(RuntimeError):
    """A fake could not be started, reached or attached; the message says why and what to do."""


@dataclass(frozen=True)
class FakeOptions:
    """How to start a fake: its profile, the limits to lift, where it listens, the key it accepts, and the
    round-trip time between it and its clients (fakes/network.py; 0: loopback as it is)."""

    profile: str = "suite"
    max_sandboxes: int | None = None
    host: str = "127.0.0.1"
    port: int = 0
    api_key: str | None = None
    rtt_ms: float = 0.0
    jitter_ms: float = 0.0  # up to this much more per crossing, at random (fakes/network.py)

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"unknown fake profile {self.profile!r}; one of {', '.join(PROFILES)}")
        if self.max_sandboxes is not None and self.max_sandboxes < 1:
            raise ValueError(f"max_sandboxes must be at least 1, not {self.max_sandboxes}")
        if not 0 <= self.rtt_ms <= MAX_RTT_MS or not 0 <= self.jitter_ms <= MAX_RTT_MS:
            raise ValueError(
                f"a round-trip time of {self.rtt_ms:g} ms or a jitter of {self.jitter_ms:g} ms is outside "
                f"0..{MAX_RTT_MS} ms"
            )

    def argv(self) -> list[str]:
        """These options as command-line arguments of ``python -m fakes.process``."""
        args = ["--profile", self.profile, "--host", self.host, "--port", str(self.port)]
        if self.max_sandboxes is not None:
            args += ["--max-sandboxes", str(self.max_sandboxes)]
        if self.api_key:
            args += ["--api-key", self.api_key]
        if self.rtt_ms:
            args += ["--rtt", f"{self.rtt_ms:g}"]
        if self.jitter_ms:
            args += ["--jitter", f"{self.jitter_ms:g}"]
        return args


def _no_cap(name: str, options: FakeOptions) -> None:
    if options.max_sandboxes is not None:
        raise ValueError(
            f"the {name} fake has no sandbox cap to set (it makes sandboxes on demand); drop --max-sandboxes"
        )


def _tempdir(workdir: Path, options: FakeOptions) -> FakeService:
    from fakes.tempdir_box.world import TempdirWorld

    _no_cap("tempdir", options)
    root = workdir / "boxes"
    root.mkdir(parents=True, exist_ok=True)
    token = "tbx_" + secrets.token_hex(16)
    return FakeService(
        name="tempdir",
        env={"TEMPDIR_BOX_ROOT": str(root), "TEMPDIR_BOX_TOKEN": token},
        world=TempdirWorld(root),
        secret_vars=frozenset({"TEMPDIR_BOX_TOKEN"}),
        credential_var="TEMPDIR_BOX_TOKEN",
        paths_note="tempdir_box makes its sandboxes itself, as directories on this machine, and runs their "
        "commands as local processes at host paths: nothing to isolate, by design",
        local=True,
        _stop=lambda: shutil.rmtree(root, ignore_errors=True),
    )


def _box_lite(workdir: Path, options: FakeOptions) -> FakeService:
    from fakes.box_lite.world import BoxLiteWorld

    _no_cap("box_lite", options)
    home = workdir / "box-home"
    home.mkdir(parents=True, exist_ok=True)
    world = BoxLiteWorld(home)

    def stop() -> None:
        left = world.stop_all()
        shutil.rmtree(home, ignore_errors=True)
        if left:
            raise FakeError(f"box_lite: box daemon(s) {left} did not exit; end them and remove {home}")

    return FakeService(
        name="box_lite",
        env={"HERMES_BOX_HOME": str(home)},
        world=world,
        paths_note="boxes are Linux namespaces on this machine: their own /data, /home/agent and /tmp, "
        "their own tools layer over the system directories (which stay unchanged), no other host path",
        _stop=stop,
    )


def _listen(options: FakeOptions) -> dict[str, Any]:
    found: dict[str, Any] = {"host": options.host, "port": options.port}
    if options.api_key:
        found["api_keys"] = [options.api_key]
    return found


def _upstash(workdir: Path, options: FakeOptions) -> FakeService:
    from fakes.upstash import Settings, UpstashServer, UpstashWorld

    # The quota rule itself is tested in tests/fakes; a suite run gets room for its paused Boxes.
    settings = Settings(quota=SUITE_MAX_SANDBOXES) if options.profile == "suite" else Settings()
    if options.max_sandboxes is not None:
        settings = replace(settings, quota=options.max_sandboxes)
    server = UpstashServer(root=workdir / "boxes", settings=settings, **_listen(options)).start()
    return FakeService(
        name="upstash",
        env=server.exports(),
        world=UpstashWorld(server.world, server.faults),
        secret_vars=frozenset({"UPSTASH_BOX_API_KEY"}),
        credential_var="UPSTASH_BOX_API_KEY",
        paths_note=server.paths_note,
        _stop=server.stop,
    )


def _cloudflare(workdir: Path, options: FakeOptions) -> FakeService:
    from fakes.cloudflare.service import start as start_cloudflare
    from fakes.cloudflare.settings import EXTENSIONS, Settings

    _no_cap("cloudflare", options)
    settings = Settings.quick(extensions=EXTENSIONS) if options.profile == "suite" else Settings()
    fake = start_cloudflare(workdir, settings=settings, **_listen(options))
    fake.paths_note = fake.paths_note or str(getattr(fake.world, "paths_note", ""))
    return fake


def _deepinfra(workdir: Path, options: FakeOptions) -> FakeService:
    from fakes.deepinfra import DeepInfraServer, DeepInfraWorld, Settings
    from fakes.deepinfra.settings import KEY_VAR

    # A suite run keeps many stopped persistent sandboxes, and the SDK polls
    # state changes with 0.5 s backoff: the suite profile gives room and
    # instant transitions.  The cap and the asynchronous states are tested in
    # tests/fakes and tests/reference.
    if options.profile == "suite":
        settings = Settings(max_active=SUITE_MAX_SANDBOXES, create_delay_s=0.0, boot_delay_s=0.0, stop_delay_s=0.0)
    else:
        settings = Settings()
    if options.max_sandboxes is not None:
        settings = replace(settings, max_active=options.max_sandboxes)
    server = DeepInfraServer(root=workdir / "sandboxes", settings=settings, **_listen(options)).start()
    return FakeService(
        name="deepinfra",
        env=server.exports(),
        world=DeepInfraWorld(server.service),
        secret_vars=frozenset({KEY_VAR}),
        credential_var=KEY_VAR,
        paths_note=server.paths_note,
        _stop=server.stop,
    )


FAKES: dict[str, Callable[[Path, FakeOptions], FakeService]] = {
    "tempdir": _tempdir,
    "upstash": _upstash,
    "cloudflare": _cloudflare,
    "deepinfra": _deepinfra,
    "box_lite": _box_lite,
}
# The fakes that are servers (every one but tempdir and box_lite, whose boxes the backend itself
# makes on this machine): these run in their own process during a suite run, and `fake serve` serves them.
SERVERS = ("cloudflare", "deepinfra", "upstash")


def check_name(name: str) -> None:
    if name not in FAKES:
        raise UnknownFake(f"unknown fake {name!r}; known fakes: {', '.join(sorted(FAKES))}")


def start(name: str, workdir: Path, options: FakeOptions | None = None) -> FakeService:
    """Fake ``name`` serving from this process, its world under ``workdir`` (behind a network with the
    options' round-trip time, where it has one)."""
    check_name(name)
    options = options or FakeOptions()
    if (options.rtt_ms or options.jitter_ms) and name not in SERVERS:
        raise ValueError(
            f"the {name} fake has no network to delay: its sandboxes are on this machine (drop --rtt for it)"
        )
    fake = FAKES[name](Path(workdir), options)
    if not (options.rtt_ms or options.jitter_ms):
        return fake
    from fakes.network import delayed

    try:
        return delayed(fake, options.rtt_ms / 1000, jitter_s=options.jitter_ms / 1000)
    except BaseException:
        fake.stop()
        raise
