"""config_box: a tempdir_box whose settings come only from Hermes's config module.

A fixture of the kit's own tests, loaded as a plugin directory.  Like many
vendor plugins it reads its section of the Hermes home's config.yaml,
``terminal.config_box``, through ``hermes_cli.config`` when it creates a
sandbox, and nowhere else: the box root is ``terminal.config_box.root``, with one
tree of boxes per Hermes home (``hermes_constants.hermes_home_key``), and an
optional ``config_box.yaml`` in the home read with ``hermes_cli.config.fast_safe_load``
may name another root; the boxes go into the subdirectory named by the plugin
setting ``subdir`` (``ctx.get_config("subdir", "boxes")``, as Hermes reads
``plugins.entries.config-box.settings``).  It therefore works only on a host that
offers those names, as released Hermes does, and in a run whose Hermes home holds
the run's terminal settings (--backend-config).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def box_root_setting(subdir: str = "boxes") -> Path:
    """``terminal.config_box.root`` (or config_box.yaml's ``root``), read through Hermes's config module,
    with a directory of its own per Hermes home."""
    import hashlib

    from hermes_cli.config import cfg_get, fast_safe_load, get_config_path, load_config
    from hermes_constants import hermes_home_key

    root = cfg_get(load_config(), "terminal", "config_box", "root")
    overrides = get_config_path().with_name("config_box.yaml")
    if overrides.is_file():
        root = (fast_safe_load(overrides.read_text("utf-8")) or {}).get("root", root)
    if not isinstance(root, str) or not root.strip():
        raise RuntimeError(
            "config_box needs terminal.config_box.root in the Hermes home's config.yaml "
            "(hermes config set terminal.config_box.root /path/to/boxes)"
        )
    home = hashlib.sha256(hermes_home_key().encode()).hexdigest()[:12]
    return Path(root.strip()) / subdir / f"home-{home}"


def _provider(subdir: str) -> Any:
    from fakes.tempdir_box.box_provider import TempdirBoxProvider

    class ConfigBoxProvider(TempdirBoxProvider):
        name = "config_box"

        def box_root(self) -> Path:
            return box_root_setting(subdir)

    return ConfigBoxProvider()


def register(ctx: Any) -> None:
    from fakes.tempdir_box import register_made

    read = getattr(ctx, "get_config", None)  # Hermes before plugin settings has none
    subdir = str(read("subdir", "boxes")) if callable(read) else "boxes"
    register_made(ctx, lambda: _provider(subdir), "config_box")
