"""Read the ``terminal:`` section of Hermes's config.yaml, fail-soft.

Plugins get only container_config from the host, so vendor keys such as
``terminal.upstash_box_size`` are read from $HERMES_HOME/config.yaml, where
``hermes config set`` writes them.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import yaml

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


def as_bool(value: Any, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def as_list(value: Any) -> list[str]:
    """A YAML list or a comma-separated string, as a list of stripped strings."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(item).strip() for item in items if str(item).strip()]


def secret(name: str) -> str | None:
    """One variable from Hermes's secret scope; stripped, None when unset or blank."""
    from agent.secret_scope import get_secret

    value = get_secret(name)
    return value.strip() if isinstance(value, str) and value.strip() else None
