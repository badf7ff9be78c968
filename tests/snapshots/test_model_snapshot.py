"""Snapshot of the Model step on the embedded default: tiny model validated, sample data checked.

TRAINWIZ_HOME is a fixed path so the paths on screen do not change from run to run; the tiny
model is deterministic (seeded weights, sentencepiece trained on the bundled data).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from backend.preset import load_preset
from screens.model import ModelScreen
from tests.backend.test_model_validate import shared_tiny
from tests.waiting import pilot_until
from tui.app import TrainwizApp

HOME = Path("/tmp/trainwiz-snapshot-model-home")


@pytest.fixture(autouse=True)
def _home(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    shutil.rmtree(HOME, ignore_errors=True)
    shutil.copytree(shared_tiny(tmp_path_factory), HOME / "models" / "tiny-llama")
    monkeypatch.setenv("TRAINWIZ_HOME", str(HOME))


async def _checked(pilot: Pilot[Any]) -> None:
    screen = pilot.app.screen
    assert isinstance(screen, ModelScreen)
    await pilot_until(
        pilot,
        lambda: screen.report is not None and screen.data_report is not None,
        what="the model validated and the data checked",
        timeout=30,
        seen=lambda: (
            str(screen.query_one("#model-status").render()),
            str(screen.query_one("#data-report").render()),
        ),
    )
    assert screen.data_report is not None
    await pilot.pause()


def test_model_step_tiny_120x40(snap_compare: Any) -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="model")
    assert snap_compare(app, terminal_size=(120, 40), run_before=_checked)


def test_model_step_tiny_80x24(snap_compare: Any) -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="model")
    assert snap_compare(app, terminal_size=(80, 24), run_before=_checked)
