"""tests/training_side.on_first_use: pytest's questions to a module's names import nothing; a
test's first real use imports the library, and then it is the real module's answers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.training_side import on_first_use


def test_collection_probes_import_nothing_and_first_use_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "heavy_stand_in_lib.py").write_text("VALUE = 42\n__version__ = '1.0'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "heavy_stand_in_lib", raising=False)
    lib = on_first_use("heavy_stand_in_lib")
    assert not hasattr(lib, "__test__")  # what pytest asks every name of a collected module
    assert not issubclass(type(lib), type) and not hasattr(lib, "__bases__")
    assert "heavy_stand_in_lib" not in sys.modules
    assert lib.__file__ == str(tmp_path / "heavy_stand_in_lib.py")  # module data: imports
    assert "heavy_stand_in_lib" in sys.modules
    assert (lib.VALUE, lib.__version__) == (42, "1.0")
    assert not hasattr(lib, "missing")  # the real module's answer
