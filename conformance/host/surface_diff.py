"""How the kit's stand-ins differ from a Hermes tree: the names plugins import, and call signatures.

Both sides are read from source with ``ast`` (nothing of the tree is imported, so any
checkout or installed tree can be compared, whatever its dependencies).  Two kinds of
difference matter to a plugin:

- ``missing``: a name public plugins import (``hermes_names.PLUGIN_IMPORTS``) that the
  tree has and the stand-in lacks: such a plugin fails on the builtin host for the
  kit's reason;
- ``signature``: a function, or a method of a class, both sides define with other
  parameters (names, order, keyword-only, defaults, ``*args``/``**kwargs``): a plugin
  calling it the tree's way gets another answer or a TypeError on the builtin host.

A difference the project has reviewed (the stand-in follows another release there, or
adds what a proposal asks) is recorded with its reason in
``reviewed/host-diff-<release>.yaml``; ``hermes-backend-kit host diff`` fails on any
other, so a new one fails CI the day a tree brings it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from conformance.host import hermes_names
from conformance.host.abi import STANDINS

# Stand-ins outside abi.STANDINS: (Hermes module, kit module, the top-level names compared).
EXTRA_STANDINS = (("hermes_cli.plugins", "conformance.host.registry", ("PluginContext",)),)


@dataclass(frozen=True)
class Difference:
    key: str  # module.name or module.Class.method
    kind: str  # "missing" | "signature"
    standin: str  # the stand-in's signature, or "absent"
    tree: str

    def line(self) -> str:
        if self.kind == "missing":
            return f"{self.key}: plugins import it, the tree has it {self.tree}, the stand-in lacks it"
        return f"{self.key}: stand-in {self.standin}, tree {self.tree}"


def _source(root: Path, module: str) -> Path | None:
    base = Path(root, *module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _params(args: ast.arguments) -> str:
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    parts = [f"{a.arg}{'=' if i >= first_default else ''}" for i, a in enumerate(positional)]
    if args.posonlyargs:
        parts.insert(len(args.posonlyargs), "/")
    if args.vararg:
        parts.append(f"*{args.vararg.arg}")
    elif args.kwonlyargs:
        parts.append("*")
    parts += [f"{a.arg}{'=' if d is not None else ''}" for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    if args.kwarg:
        parts.append(f"**{args.kwarg.arg}")
    return f"({', '.join(parts)})"


def signatures(path: Path, only: tuple[str, ...] | None = None) -> dict[str, str]:
    """{name or Class.method: "(a, b=, *, c)"} of the top-level functions and class methods in ``path``."""
    found: dict[str, str] = {}
    for node in ast.parse(path.read_bytes(), filename=str(path)).body:
        if only is not None and getattr(node, "name", None) not in only:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = _params(node.args)
        elif isinstance(node, ast.ClassDef):
            found[node.name] = "class"
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"{node.name}.{item.name}"] = _params(item.args)
    return found


def _kit_path(module: str) -> Path:
    return Path(__file__).parents[2].joinpath(*module.split(".")).with_suffix(".py")


def pairs() -> list[tuple[str, Path, tuple[str, ...] | None]]:
    """(Hermes module, the kit's source standing in for it, the names compared or None for all)."""
    found: list[tuple[str, Path, tuple[str, ...] | None]] = [(m, _kit_path(k), None) for m, k in STANDINS.items()]
    found += [(m, _kit_path(k), only) for m, k, only in EXTRA_STANDINS]
    return found


def differences(tree: Path) -> list[Difference]:
    """Every difference between the stand-ins and the Hermes tree at ``tree`` (its top directory)."""
    out: list[Difference] = []
    for module, kit_source, only in pairs():
        source = _source(tree, module)
        if source is None:
            continue  # a module the tree lacks: the kit stands it in on that host too
        mine, theirs = signatures(kit_source, only), signatures(source, only)
        for name in sorted(set(mine) & set(theirs)):
            if mine[name] != theirs[name] and "class" not in (mine[name], theirs[name]):
                out.append(Difference(f"{module}.{name}", "signature", mine[name], theirs[name]))
        have = hermes_names.names_in(kit_source.parent, kit_source.stem) or set()
        tree_names = hermes_names.names_in(tree, module) or set()
        for name in sorted(hermes_names.PLUGIN_IMPORTS.get(module, ())):
            if name in tree_names and name not in have and (only is None or name in only):
                out.append(Difference(f"{module}.{name}", "missing", "absent", theirs.get(name, "(a value)")))
    return out


def reviewed(release: str) -> dict[str, str]:
    """{difference key: why it is as it is} the project reviewed for ``release``; {} when none."""
    folder = resources.files("conformance.host").joinpath("reviewed")
    entry = folder.joinpath(f"host-diff-{release}.yaml")
    if not entry.is_file():
        return {}
    data: Any = yaml.safe_load(entry.read_text("utf-8")) or {}
    return {str(k): str(v) for k, v in data.items()}


def tree_release(tree: Path) -> str | None:
    """The release of the tree at ``tree``, from its own ``hermes_cli/__init__.py``."""
    from conformance.host.abi import version_in_source

    return version_in_source(tree / "hermes_cli" / "__init__.py")


def check(tree: Path, release: str) -> tuple[list[str], int]:
    """The lines ``host diff`` prints for ``tree`` and its exit status: 1 when a difference is not
    reviewed for ``release`` or a reviewed one no longer differs."""
    found = differences(tree)
    review = reviewed(release)
    lines, bad = [], 0
    for diff in found:
        why = review.get(diff.key)
        if why is None:
            bad += 1
            lines.append(f"NEW  {diff.line()}")
        else:
            lines.append(f"ok   {diff.line()}\n       reviewed: {' '.join(why.split())}")
    stale = sorted(set(review) - {d.key for d in found})
    for key in stale:
        bad += 1
        lines.append(f"GONE {key}: reviewed for {release} but no longer differs; drop it from the reviewed file")
    where = f"conformance/host/reviewed/host-diff-{release}.yaml"
    if bad:
        lines.append(
            f"{bad} unreviewed difference(s) between the stand-ins and Hermes {release} at {tree}: make the "
            f"stand-in match the tree, or record why it differs in {where}"
        )
    else:
        lines.append(f"the stand-ins match Hermes {release} at {tree} but for {len(found)} reviewed difference(s)")
    return lines, 1 if bad else 0
