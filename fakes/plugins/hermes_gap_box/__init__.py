"""hermes_gap_box: a tempdir_box that needs a Hermes module no host offers.

A fixture of the kit's own tests, loaded as a plugin directory.  Its
create_environment() imports ``hermes_cli.nonexistent_thing`` first, as a
plugin written for a newer Hermes would import a module the running host
lacks.  Everything that needs a sandbox is therefore out of reach; the kit
reports those clauses unverified because of the host, with one note naming
the module, never as the backend's failures.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("fakes.plugins.hermes_gap_box")


def _provider() -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    class HermesGapBoxProvider(TempdirBoxProvider):
        name = "hermes_gap_box"

        def create_environment(self, **kwargs: Any) -> Any:
            import hermes_cli.nonexistent_thing  # type: ignore[import-not-found]  # noqa: F401  (no host has it)

            return super().create_environment(**kwargs)

    return HermesGapBoxProvider()


def register(ctx: Any) -> None:
    try:
        provider = _provider()
    except ImportError as exc:  # a Hermes without terminal backend plugins: register nothing, as tempdir_box does
        logger.warning("this Hermes cannot host terminal backends (%s); not registered", exc)
        return
    ctx.register_terminal_environment_provider(provider)
