"""tempdir_box's provider configuration (terminal.backends.tempdir_box in config.yaml).

One setting, to exercise the host's provider-configuration extension:
``persistent_default`` keeps boxes across cleanup() when the host sends no
container_persistent (hosts send it for container backends, so it rarely
matters).  resolve() turns the raw mapping into the snapshot the host passes
back as ``backend_config``; problems() names what is wrong with one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEMA: dict[str, dict[str, Any]] = {
    "persistent_default": {
        "type": "boolean",
        "default": True,
        "description": "Keep boxes across cleanup() when the host sends no container_persistent.",
    },
}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    return None


def resolve(config: Mapping[str, Any]) -> dict[str, Any]:
    """A plain dict of the settings, booleans given as strings read as booleans; bad values kept as given."""
    resolved = dict(config)
    if "persistent_default" in resolved and _as_bool(resolved["persistent_default"]) is not None:
        resolved["persistent_default"] = _as_bool(resolved["persistent_default"])
    return resolved


def problems(config: Any) -> list[str]:
    if config is None:
        return []
    if not isinstance(config, Mapping):
        return [f"the tempdir_box settings must be a mapping, not {type(config).__name__}"]
    value = config.get("persistent_default", True)
    if _as_bool(value) is None:
        return [f"terminal.backends.tempdir_box.persistent_default must be true or false, not {value!r}"]
    return []


def persistent_default(config: Any) -> bool:
    if isinstance(config, Mapping) and not problems(config):
        return bool(_as_bool(config.get("persistent_default", True)))
    return True
