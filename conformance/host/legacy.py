"""Load a plugin the way a host without the provider ABI would (hermes-agent 0.19.0).

Run in a fresh process: ``python -m conformance.host.legacy SPEC``.  The
provider ABI modules are made unimportable and register(ctx) receives a
context without register_terminal_environment_provider.  Exit status 0 means
the plugin imported and registered without raising.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ABI_MODULES = ("agent.terminal_env_provider", "agent.provider_base", "agent.terminal_env_registry")


def _register_function(spec: str) -> Callable[[Any], object]:
    from conformance.host import loader

    register: Callable[[Any], object]
    if spec.startswith(("ep:", "entry-point:")):
        name = spec.split(":", 1)[1]
        eps = [ep for ep in importlib.metadata.entry_points(group=loader.ENTRY_POINT_GROUP) if ep.name == name]
        target = eps[0].load()
        register = getattr(target, "register", target)
    elif "/" in spec or Path(spec).is_dir():
        register = loader._import_directory(Path(spec).resolve()).register
    else:
        module_name, _, attr = spec.partition(":")
        register = getattr(importlib.import_module(module_name), attr or "register")
    return register


def main(argv: list[str]) -> int:
    from conformance.host import abi
    from conformance.host.registry import LegacyPluginContext

    abi.install("builtin")
    agent = sys.modules["agent"]
    for name in ABI_MODULES:
        sys.modules[name] = None  # type: ignore[assignment]  # makes the import raise ImportError
        if hasattr(agent, name.rsplit(".", 1)[1]):
            delattr(agent, name.rsplit(".", 1)[1])
    try:
        register = _register_function(argv[1])
        register(LegacyPluginContext())
    except BaseException:
        traceback.print_exc()
        return 1
    print("registered without raising")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
