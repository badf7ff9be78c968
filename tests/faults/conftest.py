"""Fixtures of the fault suite: a tiny model per session, copied into each test's home."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.model.tiny import make_tiny
from backend.preset.loader import load_preset
from tests.faults.helpers import ROOT, end_runs


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    preset = load_preset(ROOT / "presets" / "tiny-cpu.yaml")
    target = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    make_tiny(target, preset.model.tiny)
    return target


@pytest.fixture
def home(tiny_model: Path) -> Iterator[Path]:
    home = Path(os.environ["TRAINWIZ_HOME"])
    shutil.copytree(tiny_model, home / "models" / "tiny-llama")
    yield home
    end_runs(home)
