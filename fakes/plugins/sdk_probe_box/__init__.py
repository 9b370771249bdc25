"""sdk_probe_box: a tempdir_box behind a vendor SDK it looks up the way some plugins do.

A fixture of the kit's own tests, loaded as a plugin directory.  It treats
``upstash_box`` as its vendor SDK: it takes the module from ``sys.modules``
when something imported it already, else imports it, and says
"pip install upstash-box" when that fails.  Its probe names only the SDK
(never the variable), in every situation where it is not ready: the clause
accepts either.  On a machine without the SDK it must be judged ready to say
so; a simulation that leaves a ``None`` in ``sys.modules`` would make it read
attributes of None instead.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

logger = logging.getLogger("fakes.plugins.sdk_probe_box")
SDK = "upstash_box"
INSTALL = "pip install upstash-box"


def sdk_version() -> str | None:
    """The SDK's module name and where it lives, or None when it is not installed."""
    if SDK in sys.modules:
        module = sys.modules[SDK]
    else:
        try:
            import upstash_box as module
        except ImportError:
            return None
    return f"{module.__name__} from {module.__file__}"


def _provider() -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    class SdkProbeBoxProvider(TempdirBoxProvider):
        name = "sdk_probe_box"

        def is_available(self) -> bool:
            return sdk_version() is not None and bool(os.environ.get("TEMPDIR_BOX_TOKEN"))

        def probe(self) -> tuple[str, str]:
            found = sdk_version()
            if found is None or not os.environ.get("TEMPDIR_BOX_TOKEN"):
                return ("unavailable", f"the box SDK is not ready: {INSTALL}")
            return ("ready", found)

        def doctor_checks(self) -> list[tuple[bool, str, str]]:
            found = sdk_version()
            return [(found is not None, "sdk", found or INSTALL)]

        def check_requirements(self, config: dict[str, Any]) -> bool:
            if self.is_available():
                return True
            logger.warning("sdk_probe_box is not ready: %s", INSTALL)
            return False

    return SdkProbeBoxProvider()


def register(ctx: Any) -> None:
    from fakes.tempdir_box import register_made

    register_made(ctx, _provider, "sdk_probe_box")
