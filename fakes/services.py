"""Start a fake vendor service for a run: the variables to export and its world.

Each fake exports the vendor's own environment variables (base URL, key),
so unmodified plugins and SDKs talk to it, and exposes a world object through
which checks inspect and disturb sandboxes behind the backend's back.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class UnknownFake(ValueError):
    """--fake names a service the kit does not have."""


@dataclass
class FakeService:
    name: str
    env: dict[str, str]
    world: Any = None
    secret_vars: frozenset[str] = frozenset()
    credential_var: str | None = None  # the variable whose value authenticates to the service
    _stop: Callable[[], None] | None = field(default=None, repr=False)

    def stop(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None


def _tempdir(workdir: Path) -> FakeService:
    from fakes.tempdir_box.world import TempdirWorld

    root = workdir / "boxes"
    root.mkdir(parents=True, exist_ok=True)
    token = "tbx_" + secrets.token_hex(16)
    return FakeService(
        name="tempdir",
        env={"TEMPDIR_BOX_ROOT": str(root), "TEMPDIR_BOX_TOKEN": token},
        world=TempdirWorld(root),
        secret_vars=frozenset({"TEMPDIR_BOX_TOKEN"}),
        credential_var="TEMPDIR_BOX_TOKEN",
        _stop=lambda: shutil.rmtree(root, ignore_errors=True),
    )


def _upstash(workdir: Path) -> FakeService:
    from fakes.upstash import Settings, UpstashServer, UpstashWorld

    # A suite run keeps many paused persistent Boxes; the quota rule itself is
    # tested in tests/fakes, so the kit's account gets room for them.
    server = UpstashServer(root=workdir / "boxes", settings=Settings(quota=10_000)).start()
    return FakeService(
        name="upstash",
        env=server.exports(),
        world=UpstashWorld(server.world, server.faults),
        secret_vars=frozenset({"UPSTASH_BOX_API_KEY"}),
        credential_var="UPSTASH_BOX_API_KEY",
        _stop=server.stop,
    )


def _cloudflare(workdir: Path) -> FakeService:
    # Imported here: fakes.cloudflare.service imports this module.
    from fakes.cloudflare.service import start as start_cloudflare

    return start_cloudflare(workdir)


def _deepinfra(workdir: Path) -> FakeService:
    from fakes.deepinfra import DeepInfraServer, DeepInfraWorld, Settings
    from fakes.deepinfra.settings import KEY_VAR

    # A suite run keeps many stopped persistent sandboxes, and the SDK polls
    # state changes with 0.5 s backoff: the kit's account gets room and
    # instant transitions.  The cap and the asynchronous states are tested in
    # tests/fakes and tests/reference.
    settings = Settings(max_active=10_000, create_delay_s=0.0, boot_delay_s=0.0, stop_delay_s=0.0)
    server = DeepInfraServer(root=workdir / "sandboxes", settings=settings).start()
    return FakeService(
        name="deepinfra",
        env=server.exports(),
        world=DeepInfraWorld(server.service),
        secret_vars=frozenset({KEY_VAR}),
        credential_var=KEY_VAR,
        _stop=server.stop,
    )


FAKES: dict[str, Callable[[Path], FakeService]] = {"tempdir": _tempdir, "upstash": _upstash,
                                                   "cloudflare": _cloudflare, "deepinfra": _deepinfra}


def start(name: str, workdir: Path) -> FakeService:
    try:
        factory = FAKES[name]
    except KeyError:
        raise UnknownFake(f"unknown fake {name!r}; known fakes: {', '.join(sorted(FAKES))}") from None
    return factory(workdir)
