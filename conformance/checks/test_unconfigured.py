"""Provider calls on a backend that is not (or cannot be) configured.

Hermes runs is_available(), probe(), doctor_checks() and check_requirements()
during requirement checks, UI paints and ``hermes doctor``, also on machines
where the backend was never set up and in a gateway that multiplexes profiles.
Three situations: the required variables are nowhere (environment and scope),
the vendor SDK cannot be imported (its top-level modules are made unimportable
in this process for the duration of the calls, then restored), and
multiplexing is on with no secret scope installed (get_secret raises
UnscopedSecretError; os.environ may hold another profile's key).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from conformance.checks._support import not_applicable, returns
from conformance.checks.test_provider import PROBE_STATUSES, _RecordingEnviron

# Hermes's own modules and the kit's: never a vendor SDK.
_NOT_SDK = frozenset(
    {
        "agent",
        "tools",
        "hermes_cli",
        "hermes_constants",
        "gateway",
        "conformance",
        "fakes",
        "isolation",
        "reference",
        "tests",
    }
)
BOUNDS = {"is_available()": 1.0, "probe()": 2.0, "doctor_checks()": 10.0, "check_requirements()": 10.0}


def _required_names(kit: Any) -> list[str]:
    names = set(kit.provider.strip_env_keys)
    for entry in (kit.plugin.manifest or {}).get("requires_env") or []:
        if isinstance(entry, dict):
            if not entry.get("optional") and entry.get("name"):
                names.add(str(entry["name"]))
        elif isinstance(entry, str):
            names.add(entry)
    return sorted(names)


def _sdk_modules(kit: Any) -> dict[str, list[str]]:
    """Third-party top-level modules the plugin's package imports (anywhere), with their distributions."""
    module = inspect.getmodule(type(kit.provider))
    path = Path(getattr(module, "__file__", "") or "")
    own = (getattr(module, "__name__", "") or "").split(".")[0]
    distributions = importlib.metadata.packages_distributions()
    found: dict[str, list[str]] = {}
    for source in sorted(path.parent.glob("*.py")) if path.name else []:
        try:
            tree = ast.parse(source.read_text("utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and not node.level
                else []
            )
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in _NOT_SDK or top == own or top not in distributions:
                    continue
                found[top] = distributions[top]
    return found


@contextmanager
def _unimportable(modules: list[str]) -> Iterator[None]:
    """``import m`` raises ImportError and find_spec(m) is None for each module (and its submodules)."""
    saved = {name: mod for name, mod in sys.modules.items() if name.split(".")[0] in modules}
    for name in saved:
        del sys.modules[name]
    for name in modules:
        sys.modules[name] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in modules:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(record.getMessage())


def _timed(kit: Any, what: str, fn: Any, *args: Any) -> Any:
    started = time.perf_counter()
    value = returns(fn, *args, deadline=BOUNDS[what] + 10.0, what=what)
    elapsed = time.perf_counter() - started
    assert elapsed < BOUNDS[what], f"{what} took {elapsed:.2f}s (bound {BOUNDS[what]:g}s)"
    return value


def _calls(kit: Any, situation: str) -> dict[str, Any]:
    """Every call, none raising, each within its bound, each of its type; what it said."""
    p = kit.provider
    root, capture = logging.getLogger(), _Warnings()
    root.addHandler(capture)
    try:
        said: dict[str, Any] = {}
        try:
            said["available"] = _timed(kit, "is_available()", p.is_available)
            said["probe"] = _timed(kit, "probe()", p.probe)
            said["doctor"] = _timed(kit, "doctor_checks()", p.doctor_checks)
            said["requirements"] = _timed(
                kit, "check_requirements()", p.check_requirements, {"backend": p.name, **kit.terminal_config}
            )
        except AssertionError as exc:
            raise AssertionError(f"{situation}: {exc}") from None
    finally:
        root.removeHandler(capture)
    said["warnings"] = capture.texts
    assert isinstance(said["available"], bool), f"{situation}: is_available() returned {said['available']!r}"
    probe = said["probe"]
    assert isinstance(probe, tuple) and len(probe) == 2 and probe[0] in PROBE_STATUSES and isinstance(probe[1], str), (
        f"{situation}: probe() returned {probe!r}"
    )
    rows = said["doctor"]
    assert isinstance(rows, list) and all(
        isinstance(r, tuple)
        and len(r) == 3
        and isinstance(r[0], bool)
        and isinstance(r[1], str)
        and isinstance(r[2], str)
        for r in rows
    ), f"{situation}: doctor_checks() returned {rows!r}"
    assert isinstance(said["requirements"], bool), (
        f"{situation}: check_requirements() returned {said['requirements']!r}"
    )
    return said


def _says_what_to_set(said: dict[str, Any], hints: list[str], situation: str) -> None:
    """Whatever reports the backend not ready names one of ``hints``."""

    def names(text: str) -> bool:
        return any(h.lower() in text.lower() for h in hints)

    status, detail = said["probe"]
    if status != "ready":
        assert names(detail), f"{situation}: probe() says {status} {detail!r} without naming any of {hints}"
    failing = [f"{r[1]} {r[2]}" for r in said["doctor"] if not r[0]]
    if failing:
        assert any(names(t) for t in failing), f"{situation}: the failing doctor rows {failing} name none of {hints}"
    if said["requirements"] is False:
        assert any(names(t) for t in said["warnings"]), (
            f"{situation}: check_requirements() returned False; its warnings {said['warnings'][-3:]} "
            f"name none of {hints}"
        )


@pytest.mark.clause("provider.unconfigured")
def test_unconfigured_backend_says_what_to_set(kit, monkeypatch):
    required = _required_names(kit)
    for name in required:
        monkeypatch.delenv(name, raising=False)
    said = _calls(kit, "with no credentials set")
    _says_what_to_set(said, required, "with no credentials set")


@pytest.mark.clause("provider.unconfigured")
def test_backend_without_its_sdk_says_what_to_install(kit):
    sdks = _sdk_modules(kit)
    if not sdks:
        not_applicable("the plugin imports no third-party SDK to take away")
    with _unimportable(sorted(sdks)):
        said = _calls(kit, f"with {', '.join(sorted(sdks))} not importable")
    hints = sorted({*sdks, *(d for ds in sdks.values() for d in ds), "pip install", "install"})
    _says_what_to_set(said, hints, f"with {', '.join(sorted(sdks))} not importable")


@pytest.mark.clause("provider.unscoped-secret")
def test_unscoped_secret_read_is_survived_not_bypassed(kit):
    scope = importlib.import_module("agent.secret_scope")
    credentials = set(kit.provider.strip_env_keys)
    recorder = _RecordingEnviron(os.environ)
    real_environ = os.environ
    scope.set_multiplex_active(True)
    os.environ = recorder  # type: ignore[assignment]  # noqa: B003 - swap in a recorder, restored below
    try:
        _calls(kit, "multiplexing with no secret scope")
    finally:
        os.environ = real_environ  # noqa: B003
        scope.set_multiplex_active(False)
    bypassed = sorted(credentials & recorder.read)
    assert not bypassed, (
        f"multiplexing with no secret scope: {bypassed} read from os.environ, which may hold another profile's "
        "value; read credentials only through agent.secret_scope.get_secret"
    )
