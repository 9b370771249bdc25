"""Small helpers shared by the checks."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from conformance.host.drivers import returncode, run

__all__ = ["nonce", "out", "rc", "run", "sha256_hex"]


def out(result: dict[str, Any]) -> str:
    return result.get("output", "") if isinstance(result, dict) else ""


def rc(result: dict[str, Any]) -> int:
    return returncode(result)


def nonce(label: str = "n") -> str:
    return f"kit-{label}-{secrets.token_hex(8)}"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
