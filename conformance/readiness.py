"""Whether a backend says it can work, asked before a live run judges it.

A backend that is not configured (no credential, no setting) fails every
check for that one reason; Hermes itself never uses a backend whose
``is_available()`` is false.  So before the first check of a run against a
real service the kit asks: ``is_available()``, then, when that is false,
``probe()`` for the reason.  The answer names what is missing where it can:
the unset ``requires_env`` of plugin.yaml, else the variable names the
backend's own words mention that are not set in this environment.

``doctor`` words its availability step from the same facts: whether there is a
plugin.yaml, and whether it declares any ``requires_env``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from conformance.host.calls import bounded

ASK_DEADLINE_S = 15.0
# An environment variable's name as a message spells it: upper case, digits, at least one "_".
_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")


@dataclass(frozen=True)
class Unready:
    """Why the backend says it cannot work, and the variables that would make it."""

    said: str  # what is_available() and probe() answered, in one line
    missing: list[str]  # unset variables it needs (declared, or named in its own words)
    declared: str  # "no plugin.yaml", "no requires_env in plugin.yaml", "plugin.yaml requires_env"


def declared_requirements(manifest: Any) -> tuple[str, list[str]]:
    """(how the backend declares its variables, the names plugin.yaml requires)."""
    if not isinstance(manifest, dict):
        return "no plugin.yaml", []
    required = manifest.get("requires_env") or []
    names = []
    for item in required if isinstance(required, list) else []:
        name = item.get("name") if isinstance(item, dict) else item
        if isinstance(name, str) and name.strip():
            names.append(name.strip())
    return ("plugin.yaml requires_env" if names else "no requires_env in plugin.yaml"), names


def named_variables(text: str) -> list[str]:
    """The variable names ``text`` mentions that this environment does not set, in order."""
    found: list[str] = []
    for name in _VARIABLE.findall(text or ""):
        if name not in found and not os.environ.get(name):
            found.append(name)
    return found


def ask(provider: Any, manifest: Any) -> Unready | None:
    """None when ``is_available()`` is true; else what the backend says and what it is missing."""
    available = bounded(provider.is_available, deadline=ASK_DEADLINE_S, what="is_available()")
    if available is True:
        return None
    declared, required = declared_requirements(manifest)
    said = f"is_available() returned {available!r}"
    detail = ""
    try:
        answer = bounded(provider.probe, deadline=ASK_DEADLINE_S, what="probe()")
    except Exception as exc:
        answer = None
        said += f"; probe() raised {type(exc).__name__}"
    if isinstance(answer, tuple) and len(answer) == 2:
        status, detail = str(answer[0]), str(answer[1] or "")
        said += f"; probe() says {status}" + (f": {detail}" if detail else "")
    missing = [n for n in required if not os.environ.get(n)] or named_variables(detail)
    return Unready(said=" ".join(said.split())[:400], missing=missing, declared=declared)
