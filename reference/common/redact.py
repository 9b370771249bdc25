"""Keep credentials out of messages and logs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

MASK = "***"


def redact(text: object, secrets: Iterable[str | None]) -> str:
    out = str(text)
    for value in secrets:
        if value and len(value) >= 4:
            out = out.replace(value, MASK)
    return out


class RedactingFilter(logging.Filter):
    """A logging filter that masks the current secret values in every record."""

    def __init__(self, secrets: Callable[[], Iterable[str | None]]):
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        values = list(self._secrets())
        if any(values):
            record.msg = redact(record.getMessage(), values)
            record.args = None
        return True


_GUARDED: dict[str, RedactingFilter] = {}
_SECRETS: set[str] = set()


def guard_loggers(names: Iterable[str], secret: str | None) -> None:
    """Mask ``secret`` in records of the named third-party loggers.

    Client libraries log request headers at DEBUG (websockets logs its whole
    handshake, API key included); a filter on their own loggers masks the
    value before any handler sees it.
    """
    if secret:
        _SECRETS.add(secret)
    for name in names:
        if name not in _GUARDED:
            _GUARDED[name] = RedactingFilter(lambda: _SECRETS)
            logging.getLogger(name).addFilter(_GUARDED[name])
