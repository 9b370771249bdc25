"""unconfigured_box: a remote backend that is not configured, and says so only through its own API.

A fixture of the kit's own tests, loaded as a plugin directory.  plugin.yaml
declares no ``requires_env``; without ``UNCONFIGURED_BOX_TOKEN``,
``is_available()`` is false, ``probe()`` names the variable and
``create_environment()`` raises "requires UNCONFIGURED_BOX_TOKEN".  A live run
must stop before any check, naming the variable, instead of failing every
clause.  Its ``register()`` writes a marker file under ``~`` (as some plugins
create their config directories there): the kit must load it with a home of
its own, so the user's home stays as it was.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

TOKEN = "UNCONFIGURED_BOX_TOKEN"
MARKER = ".unconfigured-box"


def _provider() -> Any:
    from agent.terminal_env_provider import TerminalEnvironmentProvider

    class UnconfiguredBoxProvider(TerminalEnvironmentProvider):
        name = "unconfigured_box"
        is_remote = True

        def is_available(self) -> bool:
            return bool(os.environ.get(TOKEN))

        def probe(self) -> tuple[str, str]:
            if os.environ.get(TOKEN):
                return ("ready", "token set")
            return ("unavailable", f"requires {TOKEN}")

        def create_environment(self, **kwargs: Any) -> Any:
            raise RuntimeError(f"unconfigured_box requires {TOKEN}")

    return UnconfiguredBoxProvider()


def register(ctx: Any) -> None:
    marker = Path.home() / MARKER
    marker.mkdir(exist_ok=True)
    (marker / "registered").write_text("register() ran with this home\n")
    from fakes.tempdir_box import register_made

    register_made(ctx, _provider, "unconfigured_box")
