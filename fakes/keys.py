"""API keys of a fake vendor service: remembered only as digests, each key its own account."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass


def key_digest(key: str) -> str:
    """How a key (or any credential) is remembered: never the key itself."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class Account:
    """One accepted key: its own sandboxes, names and quota."""

    digest: str


class KeyRing:
    """The keys a fake accepts."""

    def __init__(self, keys: Iterable[str], vendor: str):
        self._digests = {key_digest(k) for k in keys if k}
        if not self._digests:
            raise ValueError(f"the {vendor} fake needs at least one API key")

    def add(self, key: str) -> None:
        """Accept another key: a separate account."""
        if not key:
            raise ValueError("an API key must not be empty")
        self._digests.add(key_digest(key))

    def account(self, key: str) -> Account | None:
        """The key's account, or None if the key is not accepted."""
        digest = key_digest(key)
        return Account(digest) if digest in self._digests else None
