"""misnamed_box: a tempdir_box that imports a name no Hermes release has.

A fixture of the kit's own tests, loaded as a plugin directory.  Its
create_environment() imports ``load_config_everywhere`` from
``hermes_cli.config``: a module every Hermes has, a name none has (a misspelt
import).  Unlike a name some release exports and the running host lacks (the
host's gap), this is the plugin's own error: the clauses that need a sandbox
fail, naming the import.
"""

from __future__ import annotations

from typing import Any


def _provider() -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    class MisnamedBoxProvider(TempdirBoxProvider):
        name = "misnamed_box"

        def create_environment(self, **kwargs: Any) -> Any:
            from hermes_cli.config import load_config_everywhere  # type: ignore[attr-defined]  # noqa: F401

            return super().create_environment(**kwargs)

    return MisnamedBoxProvider()


def register(ctx: Any) -> None:
    from fakes.tempdir_box import register_made

    register_made(ctx, _provider, "misnamed_box")
