"""Fixtures of the fault suite: a tiny model per session, copied into each test's home."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.helpers import end_runs


@pytest.fixture
def home(tiny_model: Path) -> Iterator[Path]:
    home = Path(os.environ["TRAINWIZ_HOME"])
    shutil.copytree(tiny_model, home / "models" / "tiny-llama")
    yield home
    end_runs(home)
