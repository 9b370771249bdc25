"""The kit's one redactor: every credential value it knows, masked in everything it writes.

The kit registers each value it can know is a credential:

- the values of the backend's ``strip_env_keys`` variables (seeded by the run),
- the values of ``--backend-config`` ``env`` entries whose names look like a
  credential's, and the password of a URL that carries one (a host, port,
  URL or path stays readable),
- the fake service's keys (its ``secret_vars`` and credential variable),
- every variable of the user's environment whose *name* looks like a
  credential (``credential_name``), when its value is at least
  ``MIN_GUESSED`` characters long.

``redact`` masks them (and their URL- and JSON-escaped spellings) in text,
and the value of every ``NAME=value`` whose name looks like a credential's,
whoever it belongs to (a process listing shows other programs' variables
the kit never knew);
``redact_data`` walks JSON-like data.  The pytest plugin applies it to each
check's report before the terminal, junit.xml or an xdist controller sees it,
to report.json/md and the badge; ``redact_logging`` makes every log handler of
the process (a plugin's own, and Python's last-resort stderr handler that
prints what is logged after pytest's handlers are gone) write masked text.
The registry is per process: each xdist worker registers what it knows (its
own fake's keys, its environment) and redacts before it sends.
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


# NAME=value as env, /proc/*/environ and shells print it, the name holding one of the credential words
# (credential_name decides); the value, after an opening quote if any, runs to a space or a quote.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_])([A-Za-z_][A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIALS?|PAT)"
    r"[A-Za-z0-9_]*)=(['\"]?)([^\s'\"]{" + str(MIN_KNOWN) + ",})",
    re.IGNORECASE,
)


def _mask_assignments(text: str) -> str:
    """``NAME=value`` with a credential's name: the value masked, the name kept (the evidence stays readable)."""
    if "=" not in text:
        return text
    return _ASSIGNMENT.sub(
        lambda m: f"{m.group(1)}={m.group(2)}{MASK}" if credential_name(m.group(1)) else m.group(0), text
    )


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
        """--backend-config env values of credential-named variables (hosts, ports and paths are not secrets;
        a secret in another variable is registered when the backend names it in strip_env_keys)."""
        for name, value in env.items():
            if credential_name(name):
                self.register(value, min_length=MIN_KNOWN)
            elif password := _url_password(value):
                self.register(password, min_length=1)

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
        if not text:
            return text
        pattern = self._compiled()
        masked = pattern.sub(MASK, text) if pattern is not None else text
        return _mask_assignments(masked)

    def contains_secret(self, text: str) -> bool:
        pattern = self._compiled()
        return bool(text and ((pattern and pattern.search(text)) or _mask_assignments(text) != text))

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


def _url_password(value: str) -> str | None:
    """The password of a URL that carries one (``https://user:pw@proxy``), else None."""
    try:
        parsed = urllib.parse.urlsplit(value.strip())
        return parsed.password if parsed.scheme and parsed.netloc else None
    except ValueError:
        return None


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
def redact_logging() -> None:
    """Every handler of this process formats through the redactor from now on (idempotent).

    Patched on ``logging.Handler`` itself, so handlers a plugin adds and the
    last-resort handler are covered; records are untouched, so a check that
    reads what was logged (``record.getMessage()``) still sees a leak.
    """
    if getattr(logging.Handler, "_kit_redacting", False):
        return
    fmt = logging.Handler.format

    def format_redacted(self: logging.Handler, record: logging.LogRecord) -> str:
        return REDACTOR.redact(fmt(self, record))

    logging.Handler.format = format_redacted  # type: ignore[method-assign]
    logging.Handler._kit_redacting = True  # type: ignore[attr-defined]


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
