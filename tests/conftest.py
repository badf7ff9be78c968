"""Shared test setup: every test gets its own TRAINWIZ_HOME, so no test sees another's runs."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _session_trainwiz_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Fixtures wider than a test (module, session) run before the per-test home below is set:
    without this they would write into the machine's own home ($XDG_STATE_HOME/trainwiz) and
    read whatever runs and caches earlier sessions left there."""
    home = tmp_path_factory.mktemp("session-trainwiz-home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRAINWIZ_HOME", str(home))
        yield home


@pytest.fixture(autouse=True)
def _trainwiz_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    home = tmp_path_factory.mktemp("trainwiz-home")
    monkeypatch.setenv("TRAINWIZ_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def _fresh_url_opener() -> Iterator[None]:
    """urllib's module-wide opener reads the proxy variables once, on its first use: a test that
    points them at a dead proxy (``loopback_only``) would leave every later ``urlopen`` of the
    same worker going through it after monkeypatch restored the variables. Drop it both ways."""
    urllib.request.install_opener(None)  # type: ignore[arg-type]
    yield
    urllib.request.install_opener(None)  # type: ignore[arg-type]


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
