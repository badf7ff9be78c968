"""A package's names loaded on first use (PEP 562), for package ``__init__`` files whose
submodules a command rarely needs all of (``backend.monitor``, ``backend.runs``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_getattr(package: str, where: Mapping[str, str]) -> Callable[[str], object]:
    """The module-level ``__getattr__`` of ``package``: ``where`` maps each name to the module
    defining it; the first lookup imports that module and keeps the value in the package, so
    the next lookup is a plain attribute."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
