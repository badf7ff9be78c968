"""The wizard's other screens in Simplified Chinese (docs/i18n.md), each at 120x40 and 80x24: Model
(the tiny model validated), Image (the seed preset on the seed's server / the H200), Launch (the
plan of the seed-like Vicuna-7B preset), Monitor (the recorded H200 run) and Troubleshoot (a real
CUDA OOM log diagnosed against the shipped preset). CJK text is two cells wide: 80x24 is where a
translated label would be cut. The set-ups are the English snapshots' own, in Chinese."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import backend.images
import backend.images.build
from backend.i18n import set_language
from backend.preset import load_preset
from screens.image import ImageScreen
from tests.backend.test_model_validate import shared_tiny
from tests.snapshots.test_image_snapshot import _surveyed
from tests.snapshots.test_launch_snapshot import _planned
from tests.snapshots.test_model_snapshot import HOME as MODEL_HOME
from tests.snapshots.test_model_snapshot import _checked
from tests.snapshots.test_monitor_snapshot import _settled as _monitor_settled
from tests.snapshots.test_troubleshoot_snapshot import _diagnosed, _Host, _make_run
from tests.tui.test_image import H200, SEED_HOST
from tests.tui.test_monitor import build as monitor_app
from tui.app import TrainwizApp

SIZES = [(120, 40), (80, 24)]
SIZE_IDS = ["120x40", "80x24"]


@pytest.fixture(autouse=True)
def _chinese() -> Iterator[None]:
    set_language("zh_CN")
    yield
    set_language("en")


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_zh_model(
    snap_compare: Any,
    size: tuple[int, int],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    shutil.rmtree(MODEL_HOME, ignore_errors=True)
    shutil.copytree(shared_tiny(tmp_path_factory), MODEL_HOME / "models" / "tiny-llama")
    monkeypatch.setenv("TRAINWIZ_HOME", str(MODEL_HOME))
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="model")
    assert snap_compare(app, terminal_size=size, run_before=_checked)


@pytest.mark.parametrize(("size", "host"), [(SIZES[0], SEED_HOST), (SIZES[1], H200)], ids=SIZE_IDS)
def test_zh_image(
    snap_compare: Any, size: tuple[int, int], host: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ImageScreen, "HOST_OVERRIDE", host)
    monkeypatch.setattr(ImageScreen, "INCLUDE_LOCAL", False)
    app = TrainwizApp(load_preset("vicuna-13b-v1.3-8xa100"), "seed", start_step="image")
    assert snap_compare(app, terminal_size=size, run_before=_surveyed)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_zh_launch_plan(
    snap_compare: Any, size: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", "/tmp/trainwiz-snapshot-home")
    pinned = lambda preset, host=None: "trainwiz-env:0123456789abcdef"  # noqa: E731
    monkeypatch.setattr(backend.images.build, "env_image_tag", pinned)
    monkeypatch.setattr(backend.images, "env_image_tag", pinned, raising=False)
    app = TrainwizApp(
        load_preset("vicuna-7b-4xa100-40g"), "vicuna-7b-4xa100-40g", start_step="launch"
    )
    assert snap_compare(app, terminal_size=size, run_before=_planned)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_zh_monitor(snap_compare: Any, size: tuple[int, int], tmp_path: Path) -> None:
    app = monitor_app(tmp_path)
    assert snap_compare(app, terminal_size=size, run_before=_monitor_settled(app))


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_zh_troubleshoot(snap_compare: Any, size: tuple[int, int]) -> None:
    _make_run()
    assert snap_compare(_Host(), terminal_size=size, run_before=_diagnosed)
