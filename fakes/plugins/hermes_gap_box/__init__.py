"""hermes_gap_box: a tempdir_box that needs a Hermes module no host offers.

A fixture of the kit's own tests, loaded as a plugin directory.  Its
create_environment() imports ``hermes_cli.nonexistent_thing`` first, as a
plugin written for a newer Hermes would import a module the running host
lacks.  Everything that needs a sandbox is therefore out of reach; the kit
reports those clauses unverified because of the host, with one note naming
the module, never as the backend's failures.
"""

from __future__ import annotations

from typing import Any


def _provider() -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    class HermesGapBoxProvider(TempdirBoxProvider):
        name = "hermes_gap_box"

        def create_environment(self, **kwargs: Any) -> Any:
            import hermes_cli.nonexistent_thing  # type: ignore[import-not-found]  # noqa: F401  (no host has it)

            return super().create_environment(**kwargs)

    return HermesGapBoxProvider()


def register(ctx: Any) -> None:
    from fakes.tempdir_box import register_made

    register_made(ctx, _provider, "hermes_gap_box")
