"""Print every module-level import cycle among trainwiz's own modules; exit 1 when there is one.

Run from the repository root (tests/backend/test_import_graph.py runs it). Every import counts,
those inside functions too: an import deferred into a function is still a dependency, and is
allowed only to put off a heavy library, never to dodge a cycle. ``--top-level`` counts only
the imports that run when a module loads. ``if TYPE_CHECKING:`` blocks never run: left out.
"""

from __future__ import annotations

import ast
import pathlib
import sys

PACKAGES = ("backend", "tui", "screens", "widgets")


def modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    out = {}
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _imports(tree: ast.Module, deferred: bool) -> list[ast.Import | ast.ImportFrom]:
    """The module's imports: at its top level, and with ``deferred`` those inside functions."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if deferred or isinstance(node, ast.ClassDef):
                stack.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.If):
            test = node.test
            if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                stack.extend(node.orelse)
                continue
            stack.extend([*node.body, *node.orelse])
        elif isinstance(node, (ast.With, ast.For, ast.While)):
            stack.extend([*node.body, *getattr(node, "orelse", [])])
        elif isinstance(node, ast.Try):
            stack.extend([*node.body, *node.orelse, *node.finalbody])
            for handler in node.handlers:
                stack.extend(handler.body)
        elif deferred and isinstance(node, ast.stmt):
            stack.extend(ast.iter_child_nodes(node))
    return found


def graph(root: pathlib.Path, deferred: bool = True) -> dict[str, set[str]]:
    files = modules(root)

    def known(name: str) -> str | None:
        while name not in files and "." in name:
            name = name.rpartition(".")[0]
        return name if name in files else None

    out: dict[str, set[str]] = {}
    for module, path in files.items():
        edges: set[str] = set()
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")), deferred):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:  # relative import
                    parts = package.split(".")
                    base = ".".join([*parts[: len(parts) - node.level + 1], base]).strip(".")
                # ``from pkg import sub`` imports the submodule; ``from pkg import name``
                # the package (for a name it defines).
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names
                ]
            for target in targets:
                found = known(target)
                if found is not None and found != module:
                    edges.add(found)
        out[module] = edges
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


def main(argv: list[str]) -> int:
    found = cycles(graph(pathlib.Path.cwd(), deferred="--top-level" not in argv))
    for component in found:
        print(f"{len(component)} modules: {', '.join(component)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
