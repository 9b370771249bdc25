"""Kit test: the project's own modules import each other without a cycle.

The graph is read from the source with ``ast``, so an import inside a
function counts as much as one at the top of a module: moving an import into
a function hides a cycle from Python's import machinery, not from the design.

Edges, for a module ``m`` of conformance/, fakes/ or reference/:

- ``import a.b.c`` and ``from a.b.c import x``: ``m`` -> ``a.b.c``, and
  ``m`` -> each package above it (``a``, ``a.b``) that is not above ``m``
  itself (those run before ``m`` does, so they cannot wait for it);
- ``from a.b import c`` where ``a.b.c`` is a module: ``m`` -> ``a.b.c``
  (plus the packages above it, as before); where ``c`` is a name:
  ``m`` -> ``a.b``, the package whose ``__init__`` must have defined it,
  even when that package is above ``m``;
- relative imports are resolved against ``m``'s package; imports under
  ``if TYPE_CHECKING:`` never run and make no edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("conformance", "fakes", "reference", "isolation", "archives")


@dataclass(frozen=True)
class Edge:
    target: str
    where: str  # path:line of the import statement


def modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file under the packages."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if "node_modules" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterable[ast.Import | ast.ImportFrom]:
    """Every import statement at any depth, except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            children = list(node.orelse)
        stack.extend(children)


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def graph(known: dict[str, Path], root: Path) -> dict[str, list[Edge]]:
    """Module -> the project modules it imports, with where."""
    return {name: _edges_of(name, path, known, root) for name, path in known.items()}


def _edges_of(name: str, path: Path, known: dict[str, Path], root: Path) -> list[Edge]:
    edges: list[Edge] = []
    running_before = set(_ancestors(name))  # packages Python has started before this module runs
    rel = path.relative_to(root)

    def add(target: str, line: int, *, init_name: bool = False) -> None:
        for ancestor in _ancestors(target):
            if ancestor in known and ancestor not in running_before and ancestor != name:
                edges.append(Edge(ancestor, f"{rel}:{line}"))
        if target in known and target != name and (init_name or target not in running_before):
            edges.append(Edge(target, f"{rel}:{line}"))

    for node in _imports(ast.parse(path.read_text("utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno)
            continue
        if node.level:
            base = _package_of(name, path).split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            if submodule in known:
                add(submodule, node.lineno)
            else:
                add(source, node.lineno, init_name=True)  # a name the module (or package __init__) defines
    return edges


def cycles(edges: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One cycle per strongly connected component that has one (Tarjan), as the edges that close it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []

    def connect(start: str) -> None:
        # Iterative Tarjan: the graph is a few hundred modules, but recursion depth is not worth betting on.
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            advanced = False
            for edge in pending:
                if edge.target not in index:
                    index[edge.target] = low[edge.target] = len(index)
                    stack.append(edge.target)
                    on_stack.add(edge.target)
                    work.append((edge.target, iter(edges[edge.target])))
                    advanced = True
                    break
                if edge.target in on_stack:
                    low[node] = min(low[node], index[edge.target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)

    for name in edges:
        if name not in index:
            connect(name)
    return [_cycle_in(set(c), edges) for c in components if len(c) > 1 or any(e.target == c[0] for e in edges[c[0]])]


def _cycle_in(component: set[str], edges: dict[str, list[Edge]]) -> list[Edge]:
    """A shortest cycle through the component's first module (breadth-first inside the component)."""
    start = min(component)
    came: dict[str, tuple[str, Edge]] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in edges[node]:
                if edge.target not in component:
                    continue
                if edge.target == start:
                    path = [Edge(start, edge.where)]
                    while node != start:
                        previous, step = came[node]
                        path.append(step)
                        node = previous
                    path.append(Edge(start, ""))
                    path.reverse()
                    return path
                if edge.target not in came:
                    came[edge.target] = (node, edge)
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"no cycle in component {sorted(component)}")


def describe(cycle: list[Edge]) -> str:
    lines = [cycle[0].target]
    lines += [f"  -> {e.target}   ({e.where})" for e in cycle[1:]]
    return "\n".join(lines)


def test_no_import_cycle_among_the_projects_modules() -> None:
    known = modules(ROOT, PACKAGES)
    assert len(known) > 100, f"found only {len(known)} modules under {', '.join(PACKAGES)}"
    found = cycles(graph(known, ROOT))
    assert not found, "import cycle(s), function-level imports included:\n\n" + "\n\n".join(describe(c) for c in found)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_check_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import helper\n",
            "pkg/b.py": "def helper():\n    from . import c\n    return c\n",
            "pkg/c.py": "import os\n\ndef later():\n    from .a import helper\n    return helper\n",
            "pkg/d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n",
        },
    )
    found = cycles(graph(modules(tmp_path, ["pkg"]), tmp_path))
    assert len(found) == 1, [describe(c) for c in found]
    assert [e.target for e in found[0]] == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"], describe(found[0])
    assert found[0][-1].where == "pkg/c.py:4"


def test_a_name_from_a_package_init_is_an_edge_to_the_init_and_a_submodule_is_not(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.server import Server\nVERSION = 1\n",
            "pkg/server.py": "from pkg import settings\n\ndef version():\n    from pkg import VERSION\n",
            "pkg/settings.py": "",
            "other/__init__.py": "",
            "other/user.py": "import pkg.settings\n",
        },
    )
    edges = graph(modules(tmp_path, ["pkg", "other"]), tmp_path)
    assert {e.target for e in edges["other.user"]} == {"pkg", "pkg.settings"}
    assert {e.target for e in edges["pkg.server"]} == {"pkg.settings", "pkg"}
    found = cycles(edges)
    assert [[e.target for e in c] for c in found] == [["pkg", "pkg.server", "pkg"]]
