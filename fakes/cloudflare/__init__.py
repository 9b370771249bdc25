"""A loopback fake of the Cloudflare bridge (kiyo-e/hermes-cloudflare-sandbox, protocol v1).

``BridgeServer`` serves the Worker's routes over a ``fakes.world`` box world:
Bearer auth, idempotent workspace init, the NDJSON exec stream with the
``hermes-exec`` supervisor's semantics, snapshots on idle and on release, and
the scripted faults of ``fakes.faults``.  ``service.start`` runs it for the kit;
``python -m fakes.cloudflare`` serves it in the foreground.
"""

from .server import LAYOUT, BridgeServer
from .settings import ROUTES, Settings
from .world_adapter import CloudflareWorld

__all__ = ["LAYOUT", "ROUTES", "BridgeServer", "CloudflareWorld", "Settings"]
