"""Sandbox names derived from Hermes task ids.

Task ids may hold ':', '/', spaces and anything else (``profile:work:sid``,
``rollout/batch 3:item/7``), so names are slugged; a short digest of the raw
id keeps ids that slug alike apart.
"""

from __future__ import annotations

import hashlib
import re
import secrets


def slug(text: str, limit: int = 40) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-") or "task"


def sandbox_name(prefix: str, task_id: str, *, unique: bool = False) -> str:
    """``<prefix>-<task slug>-<digest>``; ``unique`` adds a random suffix for per-session sandboxes."""
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    name = f"{prefix}-{slug(task_id)}-{digest}"
    return f"{name}-{secrets.token_hex(3)}" if unique else name
