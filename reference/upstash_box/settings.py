"""The upstash_box configuration: terminal.* keys, secrets, validation warnings.

    terminal.container_persistent   true   one Box per task, paused between uses
    terminal.upstash_box_size       small  small | medium | large (else small, with a warning)
    terminal.upstash_box_runtime    -      Box base image (node, python, golang, ...)
    terminal.upstash_box_keep_alive false  persistent mode only (else ignored, with a warning)
    terminal.upstash_box_labels     -      extra labels beside "hermes": at most 4, 20 characters each
    terminal.upstash_box_name_prefix hermes
UPSTASH_BOX_API_KEY (required) and UPSTASH_BOX_BASE_URL (optional) are read
through Hermes's secret scope, never from anywhere else.  A value that cannot
be used (a name prefix no Box name can carry, a yes/no key that is neither) is
a SettingsError naming the key and the fix.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from reference.common.credentials import secret as secret  # read by the provider as config.secret
from reference.common.errors import SettingsError
from reference.common.settings import as_bool, as_list, container_persistent, terminal_settings

logger = logging.getLogger("reference.upstash_box")

KEY_VAR = "UPSTASH_BOX_API_KEY"
URL_VAR = "UPSTASH_BOX_BASE_URL"
# Required variables and how to get them.
CREDENTIALS = {
    KEY_VAR: f"create a Box API key in the Upstash console and add {KEY_VAR}=<key> to the profile's "
    ".env (~/.hermes/.env by default)"
}
INSTALL = "pip install 'hermes-backend-kit[upstash]'"
SIZES = ("small", "medium", "large")
BASE_LABEL = "hermes"
MAX_EXTRA_LABELS = 4
MAX_LABEL_CHARS = 20
_LABEL = re.compile(r"^[A-Za-z0-9_.-]+$")
_PREFIX = re.compile(r"^[a-z0-9][a-z0-9-]{0,29}$")


@dataclass(frozen=True)
class Settings:
    persistent: bool = True
    size: str = "small"
    runtime: str | None = None
    keep_alive: bool = False
    labels: tuple[str, ...] = (BASE_LABEL,)
    name_prefix: str = "hermes"
    warnings: tuple[str, ...] = field(default=(), compare=False)


def resolve(
    container_config: dict[str, Any] | None, *, image: str | None = None, terminal: dict[str, Any] | None = None
) -> Settings:
    """Settings from config.yaml (``terminal``) and the host's container_config."""
    terminal = terminal_settings() if terminal is None else terminal
    warnings: list[str] = []
    persistent = container_persistent(container_config, terminal, True)

    size = str(terminal.get("upstash_box_size") or "small").strip().lower()
    if size not in SIZES:
        warnings.append(f"terminal.upstash_box_size {size!r} is not one of {', '.join(SIZES)}; using small")
        size = "small"

    keep_alive = as_bool(terminal.get("upstash_box_keep_alive"), False, setting="terminal.upstash_box_keep_alive")
    if keep_alive and not persistent:
        warnings.append("terminal.upstash_box_keep_alive is ignored with container_persistent: false")
        keep_alive = False

    labels = [BASE_LABEL]
    for label in as_list(terminal.get("upstash_box_labels"), setting="terminal.upstash_box_labels"):
        if label == BASE_LABEL or label in labels:
            continue
        if len(label) > MAX_LABEL_CHARS or not _LABEL.match(label):
            warnings.append(
                f"label {label!r} dropped: labels are at most {MAX_LABEL_CHARS} characters "
                "of letters, digits, '.', '_' and '-'"
            )
            continue
        if len(labels) > MAX_EXTRA_LABELS:
            warnings.append(f"label {label!r} dropped: at most {MAX_EXTRA_LABELS} extra labels")
            continue
        labels.append(label)

    raw_prefix = str(terminal.get("upstash_box_name_prefix") or "hermes")
    prefix = raw_prefix.strip().lower()
    if not _PREFIX.match(prefix):
        raise SettingsError(
            "terminal.upstash_box_name_prefix",
            f"{raw_prefix!r} is not a valid Box name prefix",
            "use up to 30 lowercase letters, digits and '-', e.g. "
            "hermes config set terminal.upstash_box_name_prefix hermes-laptop",
        )
    runtime = (image or "").strip() or str(terminal.get("upstash_box_runtime") or "").strip() or None
    for text in warnings:
        logger.warning("upstash_box: %s", text)
    return Settings(persistent, size, runtime, keep_alive, tuple(labels), prefix, tuple(warnings))
