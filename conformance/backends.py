"""Backends the kit knows by name, and the fake service each runs against."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownBackend:
    name: str
    spec: str  # what conformance.host.loader loads
    fake: str | None  # the fake service used unless --live
    description: str


KNOWN_BACKENDS: dict[str, KnownBackend] = {
    "tempdir_box": KnownBackend(
        "tempdir_box", "fakes.tempdir_box", "tempdir",
        "temp-dir boxes on this machine (the kit's default system under test)",
    ),
    "upstash_box": KnownBackend(
        "upstash_box", "reference.upstash_box", "upstash",
        "reference Upstash Box backend (needs the upstash extra)",
    ),
    "cloudflare_sandbox": KnownBackend(
        "cloudflare_sandbox", "reference.cloudflare_sandbox", "cloudflare",
        "reference Cloudflare Sandbox backend (bridge protocol v1 and its extensions)",
    ),
    "deepinfra": KnownBackend(
        "deepinfra", "reference.deepinfra", "deepinfra",
        "reference DeepInfra sandbox backend (needs the deepinfra extra)",
    ),
}
DEFAULT_BACKEND = "tempdir_box"


def resolve(spec: str) -> tuple[str, str | None]:
    """Return (loader spec, default fake) for a --backend value."""
    known = KNOWN_BACKENDS.get(spec)
    if known is not None:
        return known.spec, known.fake
    return spec, None
