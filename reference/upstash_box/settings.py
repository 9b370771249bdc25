"""The upstash_box configuration: terminal.* keys, secrets, validation warnings.

    terminal.container_persistent   true   one Box per task, paused between uses
    terminal.upstash_box_size       small  small | medium | large (else small, with a warning)
    terminal.upstash_box_runtime    -      Box base image (node, python, golang, ...)
    terminal.upstash_box_keep_alive false  persistent mode only (else ignored, with a warning)
    terminal.upstash_box_labels     -      extra labels beside "hermes": at most 4, 20 characters each
    terminal.upstash_box_name_prefix hermes
UPSTASH_BOX_API_KEY (required) and UPSTASH_BOX_BASE_URL (optional) are read
through Hermes's secret scope, never from anywhere else.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from reference.common.settings import as_bool, as_list, terminal_settings
from reference.common.settings import secret as secret  # read by the provider as config.secret

logger = logging.getLogger("reference.upstash_box")

KEY_VAR = "UPSTASH_BOX_API_KEY"
URL_VAR = "UPSTASH_BOX_BASE_URL"
SIZES = ("small", "medium", "large")
BASE_LABEL = "hermes"
MAX_EXTRA_LABELS = 4
MAX_LABEL_CHARS = 20
_LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")
_PREFIX = re.compile(r"^[a-z0-9][a-z0-9-]{0,29}$")


class SettingsError(ValueError):
    """A setting is unusable; the message names it and the fix."""


@dataclass(frozen=True)
class Settings:
    persistent: bool = True
    size: str = "small"
    runtime: str | None = None
    keep_alive: bool = False
    labels: tuple[str, ...] = (BASE_LABEL,)
    name_prefix: str = "hermes"
    warnings: tuple[str, ...] = field(default=(), compare=False)


def resolve(container_config: dict[str, Any] | None, *, image: str | None = None,
            terminal: dict[str, Any] | None = None) -> Settings:
    """Settings from config.yaml (``terminal``) and the host's container_config."""
    terminal = terminal_settings() if terminal is None else terminal
    cc = container_config or {}
    warnings: list[str] = []
    persistent = as_bool(cc.get("container_persistent", terminal.get("container_persistent")), True)

    size = str(terminal.get("upstash_box_size") or "small").strip().lower()
    if size not in SIZES:
        warnings.append(f"terminal.upstash_box_size {size!r} is not one of {', '.join(SIZES)}; using small")
        size = "small"

    keep_alive = as_bool(terminal.get("upstash_box_keep_alive"), False)
    if keep_alive and not persistent:
        warnings.append("terminal.upstash_box_keep_alive is ignored with container_persistent: false")
        keep_alive = False

    labels = [BASE_LABEL]
    for label in as_list(terminal.get("upstash_box_labels")):
        if label == BASE_LABEL or label in labels:
            continue
        if len(label) > MAX_LABEL_CHARS or not _LABEL.match(label):
            warnings.append(f"label {label!r} dropped: labels are at most {MAX_LABEL_CHARS} characters "
                            "of letters, digits, '.', '_' and '-'")
            continue
        if len(labels) > MAX_EXTRA_LABELS:
            warnings.append(f"label {label!r} dropped: at most {MAX_EXTRA_LABELS} extra labels")
            continue
        labels.append(label)

    raw_prefix = str(terminal.get("upstash_box_name_prefix") or "hermes")
    prefix = raw_prefix.strip().lower()
    if not _PREFIX.match(prefix):
        raise SettingsError(
            f"terminal.upstash_box_name_prefix {raw_prefix!r} is not a valid Box name prefix; "
            "use up to 30 lowercase letters, digits and '-'"
        )
    runtime = (image or "").strip() or str(terminal.get("upstash_box_runtime") or "").strip() or None
    for text in warnings:
        logger.warning("upstash_box: %s", text)
    return Settings(persistent, size, runtime, keep_alive, tuple(labels), prefix, tuple(warnings))
