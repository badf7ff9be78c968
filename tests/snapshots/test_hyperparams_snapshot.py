"""Snapshot of the Hyperparameters step: FastChat's Vicuna-7B recipe planned for 4 x A100-40G
(paths in that preset are absolute, so the picture is the same on every machine)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Select

import backend.planner.gpu as planner_gpu
from backend.preset import load_preset
from screens.hyperparams import HyperparamsScreen
from tests.waiting import pilot_until
from tui.app import TrainwizApp


@pytest.fixture(autouse=True)
def _no_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_gpu, "detect_local", lambda: None)


def _planned_for(app: TrainwizApp, gpu: str) -> Callable[[Pilot[Any]], Any]:
    async def run_before(pilot: Pilot[Any]) -> None:
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, HyperparamsScreen) and not app.workers,
            what="the Hyperparameters step with its workers done",
            timeout=20,
            seen=lambda: f"screen {type(app.screen).__name__}, workers {list(app.workers)}",
        )
        screen = app.screen
        assert isinstance(screen, HyperparamsScreen)
        before = screen._side_seq  # edits the screen has heard of
        screen.query_one("#hp-gpu", Select).value = gpu
        await pilot_until(  # the side pane is computed off the UI thread: wait for it
            pilot,
            lambda: (
                screen._side_seq > before and screen.built and screen.settled and not app.workers
            ),
            what=f"every row built and the side pane planned for {gpu}",
            timeout=20,
            seen=lambda: (
                f"built {screen.built}, settled {screen.settled}, workers {list(app.workers)}"
            ),
        )
        assert screen.settled
        await pilot.pause()

    return run_before


def test_hyperparams_a100_40g_150x45(snap_compare: Any) -> None:
    app = TrainwizApp(
        load_preset("vicuna-7b-4xa100-40g"), "vicuna-7b-4xa100-40g", start_step="hyperparams"
    )
    assert snap_compare(app, terminal_size=(150, 45), run_before=_planned_for(app, "a100-40g"))


def test_hyperparams_h200_120x40(snap_compare: Any) -> None:
    app = TrainwizApp(
        load_preset("vicuna-13b-v1.3-8xa100"), "vicuna-13b-v1.3-8xa100", start_step="hyperparams"
    )
    assert snap_compare(app, terminal_size=(120, 40), run_before=_planned_for(app, "h200"))
