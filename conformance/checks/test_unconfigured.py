"""Provider calls on a backend that is not (or cannot be) configured.

Hermes runs is_available(), probe(), doctor_checks() and check_requirements()
during requirement checks, UI paints and ``hermes doctor``, also on machines
where the backend was never set up and in a gateway that multiplexes profiles.
Three situations: the required variables are nowhere (environment and scope),
the vendor SDK was never installed (a fresh interpreter in which no finder
finds its modules or distributions: conformance.host.without_sdk), and
multiplexing is on with no secret scope installed (get_secret raises
UnscopedSecretError; os.environ may hold another profile's key).
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conformance.checks._support import not_applicable, returns
from conformance.checks.test_provider import PROBE_STATUSES, _RecordingEnviron
from conformance.host import installed

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
CHILD_TIMEOUT_S = 60.0  # the fresh interpreter: import the host and the plugin, then the four calls
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


def _hints(kit: Any, sdks: dict[str, list[str]]) -> list[str]:
    """What a message may name to tell an unconfigured backend's user what to do: a required variable, the
    SDK's module or distribution, or pip."""
    return sorted({*_required_names(kit), *sdks, *(d for ds in sdks.values() for d in ds), "pip install"})


def _sdk_modules(kit: Any) -> dict[str, list[str]]:
    """Third-party top-level modules the plugin's package imports (anywhere), with their distributions.

    A provider the kit itself defines (Hermes's built-ins) is read in its own file only: the kit's package
    is not the plugin's.  Modules of distributions every Hermes machine has, or the kit needs to run, are
    never an SDK a user may lack (conformance.host.installed).
    """
    module = inspect.getmodule(type(kit.provider))
    path = Path(getattr(module, "__file__", "") or "")
    own = (getattr(module, "__name__", "") or "").split(".")[0]
    distributions = importlib.metadata.packages_distributions()
    sources = [path] if own == "conformance" else sorted(path.parent.glob("*.py"))
    found: dict[str, list[str]] = {}
    for source in sources if path.name else []:
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
                if installed.always_present(distributions[top]):
                    continue
                found[top] = distributions[top]
    return found


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
    """Every call in this process, none raising, each within its bound, each of its type; what it said."""
    p = kit.provider
    root, capture = logging.getLogger(), _Warnings()
    root.addHandler(capture)
    try:
        said: dict[str, Any] = {}
        try:
            said["available"] = _timed(kit, "is_available()", p.is_available)
            said["probe"] = _timed(kit, "probe()", p.probe)
            said["doctor"] = _timed(kit, "doctor_checks()", p.doctor_checks)
            said["requirements"] = _timed(kit, "check_requirements()", p.check_requirements, _requirements_config(kit))
        except AssertionError as exc:
            raise AssertionError(f"{situation}: {exc}") from None
    finally:
        root.removeHandler(capture)
    said["warnings"] = capture.texts
    return _typed(said, situation)


def _requirements_config(kit: Any) -> dict[str, Any]:
    return {"backend": kit.provider.name, **kit.terminal_config}


def _typed(said: dict[str, Any], situation: str) -> dict[str, Any]:
    """``said`` after checking each call returned its type."""
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


class _Shown:
    """A value the fresh interpreter could only describe (not JSON): fails every type check, prints as it did."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _revived(value: Any) -> Any:
    if isinstance(value, dict) and "seq" in value:
        items = [_revived(v) for v in value["items"]]
        return tuple(items) if value["seq"] == "tuple" else items
    if isinstance(value, dict):
        return _Shown(str(value.get("repr")))
    return value


def _calls_without(kit: Any, sdks: dict[str, list[str]], situation: str) -> dict[str, Any]:
    """Every call in a fresh interpreter where the SDK was never installed (conformance.host.without_sdk)."""
    request = {
        "spec": kit.plugin.spec,
        "host": kit.host.mode,
        "hide": sorted(sdks),
        "distributions": sorted({d for ds in sdks.values() for d in ds}),
        "terminal": kit.terminal_config,
        "config": _requirements_config(kit),
    }
    done = subprocess.run(
        [sys.executable, "-m", "conformance.host.without_sdk"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
    )
    assert done.returncode == 0 and done.stdout.strip(), (
        f"{situation}: the fresh interpreter failed (exit {done.returncode}): {done.stderr[-1500:]}"
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if "load_error" in answer:
        raise AssertionError(
            f"{situation}: the plugin cannot even be loaded ({answer['load_error']}), so Hermes cannot ask it "
            "what is missing; import the SDK where it is used (inside create_environment() or the probe), not at "
            "the top of the plugin's modules"
        )
    said: dict[str, Any] = {"warnings": answer["warnings"]}
    for key, call, what in (
        ("available", "is_available", "is_available()"),
        ("probe", "probe", "probe()"),
        ("doctor", "doctor_checks", "doctor_checks()"),
        ("requirements", "check_requirements", "check_requirements()"),
    ):
        result = answer["calls"][call]
        assert "raised" not in result, f"{situation}: {what} raised {result['raised']}"
        assert result["seconds"] < BOUNDS[what], (
            f"{situation}: {what} took {result['seconds']:.2f}s (bound {BOUNDS[what]:g}s)"
        )
        said[key] = _revived(result["value"])
    return _typed(said, situation)


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
    # The clause accepts either: the variable to set, or the SDK to install (a probe may check that first).
    _says_what_to_set(said, _hints(kit, _sdk_modules(kit)), "with no credentials set")


@pytest.mark.clause("provider.unconfigured")
def test_backend_without_its_sdk_says_what_to_install(kit):
    sdks = _sdk_modules(kit)
    if not sdks:
        not_applicable("the plugin imports no third-party SDK to take away")
    situation = f"on a machine without {', '.join(sorted(sdks))}"
    said = _calls_without(kit, sdks, situation)
    _says_what_to_set(said, _hints(kit, sdks), situation)


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
