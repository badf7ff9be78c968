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


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded default's tiny Llama, made once per session by the model code itself
    (``make_tiny``, the spec in presets/tiny-cpu.yaml; tiny-cpu-lora uses the same one): tests
    copy it into their own TRAINWIZ_HOME instead of each building another."""
    from backend.model.tiny import make_tiny
    from backend.preset.loader import load_preset

    preset = load_preset(Path(__file__).resolve().parents[1] / "presets" / "tiny-cpu.yaml")
    target = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    make_tiny(target, preset.model.tiny)
    return target
