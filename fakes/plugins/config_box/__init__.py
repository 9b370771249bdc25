"""config_box: a tempdir_box whose settings come only from Hermes's config module.

A fixture of the kit's own tests, loaded as a plugin directory.  Like many
vendor plugins it reads its section of the Hermes home's config.yaml,
``terminal.config_box``, through ``hermes_cli.config`` when it creates a
sandbox, and nowhere else: the box root is ``terminal.config_box.root``.  It
therefore works only on a host that offers ``hermes_cli.config`` and in a run
whose Hermes home holds the run's terminal settings (--backend-config).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def box_root_setting() -> Path:
    """``terminal.config_box.root``, read through Hermes's config module."""
    from hermes_cli.config import cfg_get, load_config

    root = cfg_get(load_config(), "terminal", "config_box", "root")
    if not isinstance(root, str) or not root.strip():
        raise RuntimeError(
            "config_box needs terminal.config_box.root in the Hermes home's config.yaml "
            "(hermes config set terminal.config_box.root /path/to/boxes)"
        )
    return Path(root.strip())


def _provider() -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    class ConfigBoxProvider(TempdirBoxProvider):
        name = "config_box"

        def box_root(self) -> Path:
            return box_root_setting()

    return ConfigBoxProvider()


def register(ctx: Any) -> None:
    from fakes.tempdir_box import register_made

    register_made(ctx, _provider, "config_box")
