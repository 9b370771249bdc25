"""Signs that a backend implements an optional capability it neither declares nor disclaims.

A sign is something in the backend's own code or configuration that only a
backend offering the capability has reason to carry:

- persistence: it sets ``self._persistent`` or ``self.persistent``, reads
  ``container_persistent``, or takes a ``persistent`` constructor option;
- file-sync: it uses Hermes's FileSyncManager or iter_sync_files, defines or
  calls ``sync_back``, takes a ``file_sync`` option, or names a
  ``cache_path_base`` (where Hermes's cache files land in the sandbox);
- stdin-stream: it hands Hermes a stdin writer (``_hermes_stdin_thread`` or
  ``_hermes_stdin_errors`` on a process handle);
- any of them: a plugin.yaml setting or config-schema key that names it.

Code is read, never run: the Python files of the plugin's package (or the
module the spec names), and the modules defining the provider's class, the
classes the provider names (``environment_class`` and the like) and their
base classes, as long as they belong to the plugin's own top-level package.
Hermes's modules and the kit's are never read.  Files are parsed (ast), so a
word in a comment or a docstring is not a sign.  The same code gives the
same signs in every process of a run.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HOST_PREFIXES = ("agent", "tools", "hermes_cli", "hermes_constants", "conformance")
MAX_FILES = 400  # a plugin package larger than this is read in part
MAX_PLACES = 2  # places shown per sign

# Words that name a capability in settings (plugin.yaml, config-schema keys).
SETTING_WORDS = {"persistence": ("persist",), "file-sync": ("sync",), "stdin-stream": ("stdin",)}
# Assigned attributes: (capability, attribute, what it says).
ATTRIBUTES = (
    ("persistence", "_persistent", "sets self._persistent"),
    ("persistence", "persistent", "sets self.persistent (Hermes reads _persistent)"),
    ("stdin-stream", "_hermes_stdin_thread", "hands Hermes a stdin writer thread (_hermes_stdin_thread)"),
    ("stdin-stream", "_hermes_stdin_errors", "hands Hermes stdin write errors (_hermes_stdin_errors)"),
)
NAMES = (
    ("file-sync", "FileSyncManager", "uses Hermes's FileSyncManager"),
    ("file-sync", "iter_sync_files", "uses iter_sync_files"),
)
OPTIONS = (
    ("persistence", "persistent", "takes a persistent option"),
    ("file-sync", "file_sync", "takes a file_sync option"),
    ("stdin-stream", "stdin_stream", "takes a stdin_stream option"),
)
CONSTRUCTORS = ("__init__", "create_environment")


def find(provider: Any, loaded: Any, names: Iterable[str]) -> dict[str, list[str]]:
    """{capability: its signs} for each of ``names`` (an empty list: no sign found)."""
    wanted = set(names)
    found: dict[str, dict[str, list[str]]] = {n: {} for n in wanted}

    def add(capability: str, what: str, where: str | None = None) -> None:
        if capability in wanted:
            places = found[capability].setdefault(what, [])
            if where and where not in places:
                places.append(where)

    if wanted:
        for module, path in source_files(provider, loaded):
            for capability, what, where in _code_signs(module, path):
                add(capability, what, where)
        for capability, what in _provider_signs(provider):
            add(capability, what)
        for capability, what in _manifest_signs(getattr(loaded, "manifest", None)):
            add(capability, what)
    return {name: [_text(what, places) for what, places in found[name].items()] for name in sorted(wanted)}


def _text(what: str, places: list[str]) -> str:
    if not places:
        return what
    more = f" and {len(places) - MAX_PLACES} more" if len(places) > MAX_PLACES else ""
    return f"{what} ({', '.join(places[:MAX_PLACES])}{more})"


# ------------------------------------------------------------------ which files
def source_files(provider: Any, loaded: Any) -> list[tuple[str, Path]]:
    """(module name, file) of the plugin's own code, host and kit excluded."""
    files: dict[Path, str] = {}
    tops: set[str] = set()
    module = getattr(loaded, "module", None)
    if isinstance(module, types.ModuleType) and not _host(module.__name__):
        tops.add(module.__name__.split(".")[0])
        paths = getattr(module, "__path__", None)
        if paths:  # a package: every module in it
            for root in paths:
                for path in sorted(Path(root).rglob("*.py")):
                    if "__pycache__" not in path.parts and len(files) < MAX_FILES:
                        rel = path.relative_to(root).with_suffix("")
                        parts = [p for p in rel.parts if p != "__init__"]
                        files.setdefault(path, ".".join([module.__name__, *parts]))
        else:
            _add_module_file(files, module)
    classes = [type(provider), *_named_classes(provider)]
    tops.add(type(provider).__module__.split(".")[0])
    for cls in classes:
        for base in inspect.getmro(cls):
            name = getattr(base, "__module__", "") or ""
            if _host(name) or name.split(".")[0] not in tops:
                continue
            owner = sys.modules.get(name)
            if owner is not None:
                _add_module_file(files, owner)
    return [(name, path) for path, name in files.items()]


def _host(module_name: str) -> bool:
    top = module_name.split(".")[0]
    return top in HOST_PREFIXES or top in sys.stdlib_module_names or top == "builtins"


def _add_module_file(files: dict[Path, str], module: types.ModuleType) -> None:
    path = getattr(module, "__file__", None)
    if path and path.endswith(".py") and len(files) < MAX_FILES:
        files.setdefault(Path(path), module.__name__)


def _named_classes(provider: Any) -> list[type]:
    """Classes the provider holds in its own or its class's attributes (environment_class, ...)."""
    found = []
    spaces = [getattr(provider, "__dict__", {})]
    spaces += [vars(c) for c in inspect.getmro(type(provider)) if not _host(getattr(c, "__module__", "") or "")]
    for space in spaces:
        for value in list(space.values()):
            if isinstance(value, type) and value not in found:
                found.append(value)
    return found


# ------------------------------------------------------------------ what the code says
def _code_signs(module: str, path: Path) -> list[tuple[str, str, str]]:
    try:
        tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    docstrings = {
        id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    out = []
    for node in ast.walk(tree):
        where = f"{module}:{getattr(node, 'lineno', 0)}"
        for target in _assigned(node):
            if isinstance(target, ast.Attribute):
                for capability, attr, what in ATTRIBUTES:
                    if target.attr == attr and (attr.startswith("_hermes") or _is_self(target.value)):
                        out.append((capability, what, where))
        if isinstance(node, ast.Name | ast.Attribute):
            ident = node.id if isinstance(node, ast.Name) else node.attr
            out += [(capability, what, where) for capability, name, what in NAMES if ident == name]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name == "sync_back":
                out.append(("file-sync", "defines sync_back()", where))
            if node.name in CONSTRUCTORS:
                args = [a.arg for a in (*node.args.args, *node.args.kwonlyargs)]
                out += [
                    (capability, f"{what} in {node.name}()", where)
                    for capability, option, what in OPTIONS
                    if option in args
                ]
        if isinstance(node, ast.ClassDef):
            fields = [
                st.target.id for st in node.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)
            ]
            out += [
                (capability, f"{what} as a field of {node.name}", where)
                for capability, option, what in OPTIONS
                if option in fields
            ]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sync_back":
            out.append(("file-sync", "calls sync_back()", where))
        if isinstance(node, ast.Constant) and node.value == "container_persistent" and id(node) not in docstrings:
            out.append(("persistence", "reads terminal.container_persistent", where))
    return sorted(out, key=lambda sign: int(sign[2].rsplit(":", 1)[1]))  # in the file's order


def _assigned(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.AugAssign):
        return [node.target]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "setattr"
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return [ast.Attribute(value=node.args[0], attr=node.args[1].value)]
    return []


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


# ------------------------------------------------------------------ what the provider and plugin.yaml say
def _provider_signs(provider: Any) -> list[tuple[str, str]]:
    out = []
    try:
        base = provider.cache_path_base
    except Exception:
        base = None
    if isinstance(base, str) and base:
        out.append(("file-sync", f"provider.cache_path_base is {base!r} (Hermes's cache files land there)"))
    try:
        schema = provider.get_config_schema()
    except Exception:
        schema = None
    if isinstance(schema, dict):
        for key in schema:
            out += [(capability, f"config schema key {key!r}") for capability in _named_by(str(key))]
    return out


def _manifest_signs(manifest: Any) -> list[tuple[str, str]]:
    """Setting names in plugin.yaml: its keys (the conformance: section aside) and its requires_env names."""
    if not isinstance(manifest, dict):
        return []
    names = [str(k) for k in manifest if k != "conformance"]
    for item in manifest.get("requires_env") or ():
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            names.append(item["name"])
        elif isinstance(item, str):
            names.append(item)
    return [(capability, f"plugin.yaml setting {name!r}") for name in names for capability in _named_by(name)]


def _named_by(name: str) -> list[str]:
    lower = name.lower()
    return [capability for capability, words in SETTING_WORDS.items() if any(w in lower for w in words)]
