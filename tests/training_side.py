"""The training side's libraries (torch, transformers, peft, accelerate), loaded on first use.

A test module that imports them at its top loads them while pytest collects it: in every worker
and in the quick tier alike, whether or not one of its tests runs (~6 CPU-seconds each time,
most of a collection's cost). ``torch = on_first_use("torch")`` is a stand-in whose first
attribute access imports the real module; everything after that is the real module's.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

# The dunder names a test reads from the library itself (``torch.__file__``): these import it.
MODULE_DATA = frozenset({"__file__", "__version__", "__path__", "__all__"})


class _OnFirstUse(types.ModuleType):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__dict__["_target"] = name

    def __getattr__(self, attr: str) -> Any:
        target = self.__dict__["_target"]
        if attr.startswith("__") and attr not in MODULE_DATA and target not in sys.modules:
            # pytest's collection asks every name of a module for __test__, __bases__, ...:
            # a question about the stand-in, not a use of the library
            raise AttributeError(attr)
        return getattr(importlib.import_module(target), attr)


def on_first_use(name: str) -> Any:
    """A stand-in for the module ``name`` that imports it when a test first touches it."""
    return _OnFirstUse(name)
