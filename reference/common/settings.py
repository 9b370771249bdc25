"""Read the ``terminal:`` section of Hermes's config.yaml, and check its values.

Plugins get only container_config from the host, so vendor keys such as
``terminal.upstash_box_size`` are read from $HERMES_HOME/config.yaml, where
``hermes config set`` writes them.  A file that cannot be read gives the
defaults (with a warning); a value that cannot be used is a SettingsError that
names the key and the fix.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import yaml

from reference.common.errors import SettingsError

logger = logging.getLogger(__name__)


def hermes_home() -> Path:
    try:
        from hermes_constants import get_hermes_home

        return Path(get_hermes_home())
    except Exception:
        value = os.environ.get("HERMES_HOME", "").strip()
        return Path(value) if value else Path.home() / ".hermes"


def terminal_settings() -> dict[str, Any]:
    path = hermes_home() / "config.yaml"
    try:
        data = yaml.safe_load(path.read_text("utf-8")) or {}
    except FileNotFoundError:
        return {}
    except (OSError, yaml.YAMLError) as exc:
        logger.warning("cannot read %s (%s); using default terminal settings", path, exc)
        return {}
    terminal = data.get("terminal") if isinstance(data, dict) else None
    return dict(terminal) if isinstance(terminal, dict) else {}


TRUE = ("1", "true", "yes", "on")
FALSE = ("0", "false", "no", "off")


def as_bool(value: Any, default: bool, *, setting: str) -> bool:
    """A yes/no setting; unset or "" is ``default``, anything but a boolean word is a SettingsError."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise SettingsError(
        setting,
        f"is {value!r}, which is neither true nor false",
        f"set it to true or false, e.g. hermes config set {setting} true",
    )


def as_list(value: Any, *, setting: str) -> list[str]:
    """A YAML list or a comma-separated string, as a list of stripped strings."""
    if value is None:
        return []
    if not isinstance(value, str | list | tuple):
        raise SettingsError(
            setting,
            f"is {value!r}, not a list",
            f"give a YAML list or a comma-separated string, e.g. hermes config set {setting} a,b",
        )
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(item).strip() for item in items if str(item).strip()]


def container_persistent(container_config: dict[str, Any] | None, terminal: dict[str, Any], default: bool) -> bool:
    """container_persistent: the host's container_config first, then config.yaml's terminal section."""
    value = (container_config or {}).get("container_persistent", terminal.get("container_persistent"))
    return as_bool(value, default, setting="terminal.container_persistent")
