"""Every fixture, however wide its scope, sees a home of the test session's own: none reads or
writes the machine's TRAINWIZ_HOME ($XDG_STATE_HOME/trainwiz), so no test depends on what an
earlier run left there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backend import paths


@pytest.fixture(scope="module")
def module_home() -> Path:
    return paths.home()


def test_a_module_fixture_gets_a_session_home_not_the_machines(
    module_home: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    base = tmp_path_factory.getbasetemp()
    assert module_home.is_relative_to(base), module_home
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    assert not module_home.is_relative_to(state)


def test_each_test_then_gets_its_own(module_home: Path) -> None:
    own = paths.home()
    assert own != module_home and own.name.startswith("trainwiz-home")
