"""The kit's one redactor: every credential value it knows, masked in everything it writes.

The kit registers each value it can know is a credential:

- the values of the backend's ``strip_env_keys`` variables (seeded by the run),
- the values of ``--backend-config`` ``env`` entries, except plain URLs and paths,
- the fake service's keys (its ``secret_vars`` and credential variable),
- every variable of the user's environment whose *name* looks like a
  credential (``credential_name``), when its value is at least
  ``MIN_GUESSED`` characters long.

``redact`` masks them (and their URL- and JSON-escaped spellings) in text;
``redact_data`` walks JSON-like data.  The pytest plugin applies it to each
check's report before the terminal, junit.xml or an xdist controller sees it,
to report.json/md and the badge; ``redact_handler`` makes a log handler write
masked text.  The registry is per process: each xdist worker registers what
it knows (its own fake's keys, its environment) and redacts before it sends.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"
MIN_KNOWN = 6  # a value the kit knows to be a credential (a key variable's value, a fake's key)
MIN_GUESSED = 8  # a value guessed from its variable's name: short values are flags, not secrets

# A name is a credential's when one of its "_"-separated parts is one of these words
# (UPSTASH_BOX_API_KEY, GITHUB_TOKEN, DB_PASSWORD), unlike SSLKEYLOGFILE or KEYBOARD_LAYOUT,
# or when it contains one of the longer words anywhere (GITHUBTOKEN, MYSQLPASSWORD).
CREDENTIAL_WORDS = frozenset(
    {"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "PAT"}
)
CREDENTIAL_SUBSTRINGS = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY", "API_KEY", "PRIVATE_KEY")


def credential_name(name: str) -> bool:
    """Does this environment variable name look like it holds a credential?"""
    upper = name.upper()
    return bool(CREDENTIAL_WORDS & set(upper.split("_"))) or any(s in upper for s in CREDENTIAL_SUBSTRINGS)


class Redactor:
    """A set of secret values and the masking of them (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None

    def register(self, value: object, *, min_length: int = MIN_KNOWN) -> bool:
        """Mask ``value`` from now on (and its escaped spellings); False if it is too short to mask."""
        if not isinstance(value, str):
            return False
        value = value.strip()
        if len(value) < min_length:
            return False
        spellings = {value, urllib.parse.quote(value, safe=""), json.dumps(value)[1:-1]}
        with self._lock:
            before = len(self._values)
            self._values |= spellings
            if len(self._values) != before:
                self._pattern = None
        return True

    def register_environ(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """Register the values of every credential-named variable; the names registered."""
        environ = os.environ if environ is None else environ
        names = []
        for name, value in list(environ.items()):
            if credential_name(name) and self.register(value, min_length=MIN_GUESSED):
                names.append(name)
        return sorted(names)

    def register_config_env(self, env: Mapping[str, str]) -> None:
        """--backend-config env values: all but endpoints and paths (they are not secrets)."""
        for name, value in env.items():
            if credential_name(name) or not _endpoint_or_path(value):
                self.register(value, min_length=MIN_KNOWN)

    def values(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._values)

    def _compiled(self) -> re.Pattern[str] | None:
        with self._lock:
            if self._pattern is None and self._values:
                ordered = sorted(self._values, key=len, reverse=True)  # a longer value first
                self._pattern = re.compile("|".join(re.escape(v) for v in ordered))
            return self._pattern

    def redact(self, text: str) -> str:
        pattern = self._compiled()
        if pattern is None or not text:
            return text
        return pattern.sub(MASK, text)

    def contains_secret(self, text: str) -> bool:
        pattern = self._compiled()
        return bool(pattern and text and pattern.search(text))

    def redact_data(self, data: Any) -> Any:
        """A copy of JSON-like ``data`` (dicts, lists, tuples, strings) with every string redacted."""
        if isinstance(data, str):
            return self.redact(data)
        if isinstance(data, dict):
            return {self.redact_data(k): self.redact_data(v) for k, v in data.items()}
        if isinstance(data, list):
            return [self.redact_data(v) for v in data]
        if isinstance(data, tuple):
            return tuple(self.redact_data(v) for v in data)
        return data

    def clear(self) -> None:
        with self._lock:
            self._values.clear()
            self._pattern = None


def _endpoint_or_path(value: str) -> bool:
    value = value.strip()
    if value.startswith("/"):
        return True
    parsed = urllib.parse.urlsplit(value)
    return bool(parsed.scheme in ("http", "https", "ws", "wss") and parsed.netloc and "@" not in parsed.netloc)


# The process-wide redactor every part of the kit uses.
REDACTOR = Redactor()
register = REDACTOR.register
register_environ = REDACTOR.register_environ
register_config_env = REDACTOR.register_config_env
redact = REDACTOR.redact
redact_data = REDACTOR.redact_data
contains_secret = REDACTOR.contains_secret


def register_all(values: Iterable[object]) -> None:
    for value in values:
        register(value)


# ------------------------------------------------------------------ logs
def redact_handler(handler: logging.Handler) -> logging.Handler:
    """Make ``handler`` write redacted text.

    The text is masked as the handler formats it, not in the record: other
    handlers see the record unchanged, so a check that captures a backend's
    log records to look for leaked credentials still sees what was logged.
    """
    if getattr(handler, "_kit_redacting", False):
        return handler
    fmt = handler.format

    def format_redacted(record: logging.LogRecord) -> str:
        return REDACTOR.redact(fmt(record))

    handler.format = format_redacted  # type: ignore[method-assign]
    handler._kit_redacting = True  # type: ignore[attr-defined]
    return handler
