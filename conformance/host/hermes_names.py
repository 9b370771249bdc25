"""The names released Hermes trees export from the modules a terminal backend may import.

``hermes_names.json`` records, per module of ``SURFACE_MODULES``, every name bound at
the module's top level in each recorded release (read from the source with ``ast``:
nothing of a tree is imported).  The kit uses it to tell apart two ``ImportError``\\ s
that look alike:

- a name some Hermes release has but the running host lacks: the host's gap (the
  backend was written for that release), reported like a missing module;
- a name no recorded release has: the plugin's own mistake.

Recording a release (from an installed tree or an unpacked wheel)::

    python -m conformance.host.hermes_names record PATH RELEASE

writes the file in place; the kit's own tests check it holds the releases the noxfile
pins.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

KNOWN_FILE = "hermes_names.json"

# The modules a terminal backend may import: the ones the kit stands in (conformance.host.abi.STANDINS)
# and the others public plugins import (docs/host-surface.md).
SURFACE_MODULES = (
    "agent.deadline",
    "agent.file_safety",
    "agent.provider_base",
    "agent.secret_scope",
    "agent.terminal_env_provider",
    "agent.terminal_env_registry",
    "gateway.session_context",
    "hermes_cli.config",
    "hermes_cli.plugins",
    "hermes_constants",
    "tools.credential_files",
    "tools.env_passthrough",
    "tools.environments.base",
    "tools.environments.base_output",
    "tools.environments.docker",
    "tools.environments.file_sync",
    "tools.environments.local",
    "tools.environments.remote_common",
    "tools.environments.ssh",
    "tools.interrupt",
    "tools.lazy_deps",
    "tools.terminal_tool",
    "tools.terminal_tool_backends",
)


# Names public plugins import from Hermes (docs/host-surface.md section 1, and the names plugins
# on PyPI import that the kit's reports have met).
PLUGIN_IMPORTS: dict[str, frozenset[str]] = {
    "agent.file_safety": frozenset({"_hermes_home_path", "_hermes_root_path"}),
    "agent.secret_scope": frozenset({"get_secret"}),
    "agent.terminal_env_provider": frozenset({"TerminalEnvironmentProvider"}),
    "gateway.session_context": frozenset({"get_session_env"}),
    "hermes_cli.config": frozenset(
        {"cfg_get", "fast_safe_load", "get_env_value", "load_config", "read_raw_config", "get_hermes_home"}
    ),
    "hermes_cli.plugins": frozenset({"discover_plugins"}),
    "hermes_constants": frozenset(
        {"get_hermes_home", "get_process_hermes_home", "get_default_hermes_root", "hermes_home_key"}
    ),
    "tools.environments.base": frozenset(
        {"BaseEnvironment", "EnvironmentConnectionError", "_ThreadedProcessHandle", "_popen_bash"}
    ),
    "tools.environments.base_output": frozenset({"_ThreadedProcessHandle", "_popen_bash"}),
    "tools.environments.file_sync": frozenset(
        {"FileSyncManager", "iter_sync_files", "_SYNC_BACK_MAX_RETRIES", "_credential_host_paths"}
    ),
    "tools.interrupt": frozenset({"is_interrupted"}),
    "tools.lazy_deps": frozenset({"ensure"}),
}


def _bound(body: list[ast.stmt], out: set[str]) -> None:
    """Names a module's top level binds, into ``out`` (branches of top-level if/try/with included)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                out.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update((alias.asname or alias.name).split(".")[0] for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.If):
            _bound(node.body, out)
            _bound(node.orelse, out)
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                _bound(part, out)
        elif isinstance(node, ast.With):
            _bound(node.body, out)


def names_in(tree: Path, module: str) -> set[str] | None:
    """The names ``module`` binds at its top level in the source tree ``tree``; None when it has no such module."""
    base = Path(tree, *module.split("."))
    for source in (base.with_suffix(".py"), base / "__init__.py"):
        if source.is_file():
            found: set[str] = set()
            _bound(ast.parse(source.read_bytes(), filename=str(source)).body, found)
            return found
    return None


@cache
def known() -> dict[str, Any]:
    """The recorded releases and names: {"releases": [..], "modules": {module: {name: [release, ..]}}}."""
    text = resources.files("conformance.host").joinpath(KNOWN_FILE).read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def releases() -> list[str]:
    return list(known()["releases"])


def exporting(module: str, name: str) -> list[str]:
    """The recorded releases whose ``module`` binds ``name`` (empty: none, or a module not recorded)."""
    return list(known()["modules"].get(module, {}).get(name, []))


def recorded(module: str) -> bool:
    return module in known()["modules"]


def record(tree: Path, release: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``release``'s names from ``tree`` added (a release recorded before is replaced)."""
    modules: dict[str, dict[str, list[str]]] = {
        module: {name: [r for r in found if r != release] for name, found in names.items()}
        for module, names in data.get("modules", {}).items()
    }
    for module in SURFACE_MODULES:
        for name in names_in(tree, module) or ():
            modules.setdefault(module, {}).setdefault(name, []).append(release)
    order = [*[r for r in data.get("releases", []) if r != release], release]
    tidy = {
        module: {name: sorted(found, key=order.index) for name, found in sorted(names.items()) if found}
        for module, names in sorted(modules.items())
    }
    return {"releases": order, "modules": tidy}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.host.hermes_names")
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="add a Hermes release's names to hermes_names.json")
    rec.add_argument("tree", type=Path, help="the directory holding the release's hermes_cli/, tools/ and agent/")
    rec.add_argument("release", help="its version, as the kit reports it (0.22.2.post1)")
    args = parser.parse_args(argv)
    if not (args.tree / "hermes_cli").is_dir():
        print(f"error: {args.tree} holds no hermes_cli/ package — give the tree's top directory", file=sys.stderr)
        return 2
    target = Path(__file__).with_name(KNOWN_FILE)
    data = json.loads(target.read_text("utf-8")) if target.is_file() else {}
    target.write_text(json.dumps(record(args.tree, args.release, data), indent=1) + "\n", "utf-8")
    print(f"recorded Hermes {args.release} from {args.tree} in {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
