"""A backend's requirement calls on a machine without its vendor SDK, in a fresh interpreter.

Run as ``python -m conformance.host.without_sdk`` with a JSON request on stdin
(``spec``, ``host``, ``hide``: the SDK's top-level modules and distributions,
``config``: check_requirements' argument).  Before anything else the child
wraps every finder of ``sys.meta_path`` so that the hidden modules are found
by none of them and their distributions by no metadata search: ``import x``
raises ModuleNotFoundError naming ``x``, ``importlib.util.find_spec("x")`` is
None, ``"x" in sys.modules`` is False and ``importlib.metadata.version("x")``
raises PackageNotFoundError, exactly as where the SDK was never installed.
Then it installs the host, loads the plugin, and calls is_available(),
probe(), doctor_checks() and check_requirements(config), each twice: what the
first call said, and the faster call's time (the first also pays for imports
a warm Hermes process has made already).  It
prints one JSON object: what each call returned (``repr`` for what JSON cannot
hold), what raised, the seconds each took and the warnings logged, or
``load_error`` when the plugin cannot even be loaded without its SDK.
"""

from __future__ import annotations

import importlib.abc
import json
import logging
import sys
import time
from collections.abc import Iterable
from typing import Any

CALLS = ("is_available", "probe", "doctor_checks", "check_requirements")


class _Hiding(importlib.abc.MetaPathFinder):
    """One finder of sys.meta_path, blind to the hidden modules and distributions."""

    def __init__(self, inner: Any, modules: frozenset[str], distributions: frozenset[str]) -> None:
        self.inner = inner
        self.modules = modules
        self.distributions = distributions

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".", 1)[0] in self.modules:
            return None
        find = getattr(self.inner, "find_spec", None)
        return find(fullname, path, target) if find is not None else None

    def find_distributions(self, context: Any = None) -> Iterable[Any]:
        find = getattr(self.inner, "find_distributions", None)
        if find is None:
            return ()
        found = find(context) if context is not None else find()
        return [d for d in found if _normal(d.metadata["Name"] or "") not in self.distributions]

    def invalidate_caches(self) -> None:
        invalidate = getattr(self.inner, "invalidate_caches", None)
        if invalidate is not None:
            invalidate()


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def hide(modules: Iterable[str], distributions: Iterable[str]) -> None:
    """Make ``modules`` (top-level names) and ``distributions`` unfindable in this interpreter."""
    mods = frozenset(modules)
    dists = frozenset(_normal(d) for d in distributions)
    for name in [n for n in sys.modules if n.split(".", 1)[0] in mods]:
        del sys.modules[name]
    sys.meta_path[:] = [_Hiding(f, mods, dists) for f in sys.meta_path]
    sys.path_importer_cache.clear()


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.texts.append(record.getMessage())
        except Exception:
            self.texts.append(str(record.msg))


def _plain(value: Any) -> Any:
    """``value`` as JSON holds it, tuples as lists; anything else as {"repr": ...}."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return {"seq": type(value).__name__, "items": [_plain(v) for v in value]}
    return {"repr": repr(value)[:300]}


def run(request: dict[str, Any]) -> dict[str, Any]:
    hide(request["hide"], request.get("distributions") or ())
    from conformance.host import abi, loader
    from conformance.host.registry import ProviderRegistry

    abi.install(request.get("host") or "auto")
    root = logging.getLogger()
    capture = _Warnings()
    root.addHandler(capture)
    try:
        try:
            plugin = loader.load(request["spec"], ProviderRegistry(), config={"terminal": request["terminal"]})
        except Exception as exc:
            return {"load_error": f"{type(exc).__name__}: {exc}"[:1000], "warnings": capture.texts}
        provider = plugin.provider
        results: dict[str, Any] = {}
        for name in CALLS:
            args = (request["config"],) if name == "check_requirements" else ()
            seconds = []
            for _ in range(2):  # the faster of two: a fresh interpreter's first call also pays for imports
                started = time.perf_counter()
                try:
                    value = {"value": _plain(getattr(provider, name)(*args))}
                except Exception as exc:
                    value = {"raised": f"{type(exc).__name__}: {exc}"[:500]}
                seconds.append(time.perf_counter() - started)
                results.setdefault(name, value)  # what the first call said
            results[name]["seconds"] = round(min(seconds), 3)
        return {"calls": results, "warnings": capture.texts}
    finally:
        root.removeHandler(capture)


def main() -> int:
    request = json.loads(sys.stdin.read())
    print(json.dumps(run(request)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
