"""A first visit to a step only shows it: what the wizard can do before the move is done before.

- No stylesheet re-parse on a first visit (Textual marked each new screen as behind the App's
  CSS and re-parsed the whole stylesheet twice to catch it up).
- The Hyperparameters screen is built, whole, while an earlier step is on screen, and the move
  to it shows that same screen with every row and the preset's current values.
- Opened directly, the form shows its first rows at once and the rest after the first frame;
  the palette's "Edit field" on a row not built yet still lands in that row.

These lean on Textual internals (``tui/step_screens.py``); Textual is pinned, and these fail
if an upgrade moves them.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.css.stylesheet import Stylesheet
from textual.pilot import Pilot
from textual.widgets import Input

import backend.planner.gpu as planner_gpu
from backend.planner.fields import form_fields
from backend.preset import load_preset
from screens.hyperparams import HyperparamsScreen, field_id
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from widgets.form_field import FormField


@pytest.fixture(autouse=True)
def _no_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_gpu, "detect_local", lambda: None)


async def _until(pilot: Pilot[Any], ready: Any, what: str) -> None:
    """``pilot_until`` saying which step is shown and how far the Hyperparameters form is."""
    app: Any = pilot.app

    def seen() -> str:
        form = app.step_screen("hyperparams")
        built = None if form is None else (getattr(form, "built", None), form.settled)
        return f"step {app.current_step!r}, screen {type(app.screen).__name__}, form {built}"

    await pilot_until(pilot, ready, what=what, timeout=20, seen=seen)


async def test_a_first_visit_reparses_no_stylesheet(monkeypatch: pytest.MonkeyPatch) -> None:
    reparses: list[int] = []
    original = Stylesheet.reparse

    def counting(self: Stylesheet) -> None:
        reparses.append(1)
        original(self)

    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="model")
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(  # the start's own work is over: the model step, the form built ahead
            pilot,
            lambda: (
                app.screen.is_mounted and getattr(app.step_screen("hyperparams"), "built", False)
            ),
            "the model step shown, the Hyperparameters form built ahead",
        )
        monkeypatch.setattr(Stylesheet, "reparse", counting)
        for step_id in ("image", "hyperparams", "launch"):
            assert app.step_screen(step_id) is None or step_id == "hyperparams"
            assert app.goto_step(step_id)
            await _until(
                pilot,
                lambda s=step_id: app.screen is app.step_screen(s) and app.screen.is_mounted,
                f"the {step_id} step shown and mounted",
            )
            await pilot.pause()
        assert reparses == []


async def test_hyperparameters_is_built_while_an_earlier_step_is_shown() -> None:
    preset = load_preset("tiny-cpu")
    app = TrainwizApp(preset, "tiny-cpu", start_step="image")
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, lambda: app.step_screen("hyperparams") is not None, "built ahead")
        ahead = app.step_screen("hyperparams")
        assert isinstance(ahead, HyperparamsScreen)
        await _until(pilot, lambda: ahead.built and ahead.settled, "every row, side pane")
        assert app.current_step == "image"  # nothing moved: it was built hidden
        # An edit made meanwhile (another step's) is shown when the step is.
        edited = app.preset.model_copy(deep=True)
        edited.training.learning_rate = 0.00042
        app.propose_preset(edited)
        assert app.goto_step("hyperparams")
        await _until(pilot, lambda: app.screen is ahead, "the move shows the built screen")
        rows = list(ahead.query(FormField))
        assert [r.path for r in rows] == [f.path for f in form_fields()]

        def learning_rate() -> object:
            editor = ahead.query_one(f"#{field_id('learning_rate')}", FormField).editor
            return getattr(editor, "value", None)

        await pilot_until(
            pilot,
            lambda: learning_rate() == "0.00042",
            what="learning_rate to show the edit made meanwhile",
            timeout=20,
            seen=lambda: f"learning_rate shows {learning_rate()!r}",
        )
        editor = ahead.query_one(f"#{field_id('learning_rate')}", FormField).editor
        assert isinstance(editor, Input) and editor.value == "0.00042"


async def test_opened_directly_the_form_builds_the_rest_after_its_first_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the rest starts after the first frame; held back long enough that a loaded machine
    # still finds the first frame's rows alone when it looks
    monkeypatch.setattr(HyperparamsScreen, "FIRST_FRAME_S", 3.0)
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="hyperparams")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, HyperparamsScreen)
        assert len(screen.query(FormField)) == HyperparamsScreen.FIRST_ROWS  # the first frame
        late = "dataloader_num_workers"
        assert [f.path for f in form_fields()].index(late) >= HyperparamsScreen.FIRST_ROWS
        screen.focus_field(late)  # a row not built yet: built now, focused at once
        await pilot.press("end", "backspace", "backspace", "3")  # the keys come straight after
        await _until(pilot, lambda: screen.built, "every row")
        row = screen.query_one(f"#{field_id(late)}", FormField)
        assert screen.focused is row.editor
        assert isinstance(row.editor, Input) and row.editor.value == "3"
        await _until(pilot, lambda: app.preset.training.dataloader_num_workers == 3, "in preset")
        assert len(screen.query(FormField)) == len(form_fields())
        assert [r.path for r in screen.query(FormField)] == [f.path for f in form_fields()]


async def test_a_row_built_late_shows_an_edit_made_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(HyperparamsScreen, "FIRST_FRAME_S", 3.0)  # the late rows stay unbuilt
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="hyperparams")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, HyperparamsScreen) and not screen.built
        edited = app.preset.model_copy(deep=True)
        late = "max_grad_norm"
        assert [f.path for f in form_fields()].index(late) >= HyperparamsScreen.FIRST_ROWS
        edited.training.max_grad_norm = 0.7
        app.propose_preset(edited)
        await _until(pilot, lambda: screen.built, "every row")
        editor = screen.query_one(f"#{field_id(late)}", FormField).editor
        assert isinstance(editor, Input) and editor.value == "0.7"
