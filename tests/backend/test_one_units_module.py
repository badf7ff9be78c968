"""Sizes and durations are written by backend/units.py alone: a second ``GIB = 1024**3`` or a
private ``_gib`` formatter is how two screens come to print one number two ways."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("backend", "tui", "screens", "widgets")
OWNER = Path("backend/units.py")
CONSTANTS = {"GIB", "MIB", "KIB", "GB", "MB"}
FORMATTERS = {"gib", "_gib", "mib", "_mib", "duration", "_duration", "human", "_human", "clock"}


def _copies(source: str) -> list[tuple[int, str]]:
    """(line, name) of unit constants and size/duration formatters a module defines itself.
    Module level and function level alike; a method is a class's own business."""
    tree = ast.parse(source)
    methods = {
        id(node)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp | ast.Constant):
            out += [
                (node.lineno, t.id)
                for t in node.targets
                if isinstance(t, ast.Name) and t.id in CONSTANTS
            ]
        elif (
            isinstance(node, ast.FunctionDef)
            and node.name in FORMATTERS
            and id(node) not in methods
        ):
            out.append((node.lineno, node.name))
    return out


def test_no_unit_constant_or_formatter_outside_the_units_module() -> None:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel == OWNER or "locale" in rel.parts:
                continue
            copies = _copies(path.read_text(encoding="utf-8"))
            if copies:
                found[str(rel)] = copies
    assert found == {}, "use backend.units instead: " + "; ".join(
        f"{where}:{line} {name}" for where, hits in found.items() for line, name in hits
    )


def test_the_scan_finds_a_copy() -> None:
    assert _copies("GIB = 1024**3\n") == [(1, "GIB")]
    assert _copies("def f():\n    def gib(x):\n        return x\n") == [(2, "gib")]
    assert _copies("class M:\n    def gib(self, v):\n        return v\n") == []
