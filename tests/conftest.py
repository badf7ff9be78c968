"""Shared test setup: every test gets its own TRAINWIZ_HOME, so no test sees another's runs."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _trainwiz_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    home = tmp_path_factory.mktemp("trainwiz-home")
    monkeypatch.setenv("TRAINWIZ_HOME", str(home))
    return home
