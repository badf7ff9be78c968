"""Fixtures of the fault suite: a tiny model per session, copied into each test's home."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.helpers import end_runs


@pytest.fixture
def home() -> Iterator[Path]:
    """This test's TRAINWIZ_HOME, the tiny model in it already (tests/conftest.py)."""
    home = Path(os.environ["TRAINWIZ_HOME"])
    yield home
    end_runs(home)
