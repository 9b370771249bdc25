"""Workspace and request ids, derived on the client as protocol v1 requires.

Ids match ``[a-z0-9][a-z0-9-]{0,62}``.  A persistent workspace is
``h-`` + 40 hex of sha256(namespace NUL key), where the key is
HERMES_CF_WORKSPACE or the task id, so the same profile and task find the same
workspace again and other namespaces never collide with it.  An ephemeral
workspace adds a random part, so every environment gets its own.  Request ids
are 32 random hex digits, made before the request is sent, so a cancel can
name a command the Worker has not seen yet.
"""

from __future__ import annotations

import hashlib
import re
import uuid

WORKSPACE_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


def _digest(namespace: str, key: str) -> str:
    raw = namespace.encode("utf-8", "surrogateescape") + b"\0" + key.encode("utf-8", "surrogateescape")
    return hashlib.sha256(raw).hexdigest()


def persistent_id(namespace: str, key: str) -> str:
    return "h-" + _digest(namespace, key)[:40]


def ephemeral_id(namespace: str, key: str) -> str:
    return f"h-{_digest(namespace, key)[:24]}-{uuid.uuid4().hex}"


def request_id() -> str:
    return uuid.uuid4().hex
