"""A preset made through the wizard, saved, and replayed gives exactly the session's plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from backend.plan import build_plan
from backend.preset import load_preset
from screens.hyperparams import HyperparamsScreen, field_id
from screens.preset_picker import SavePresetDialog
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from widgets.form_field import FormField


@pytest.fixture(autouse=True)
def _no_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import backend.planner.gpu as gpu

    monkeypatch.setattr(gpu, "detect_local", lambda: None)


async def _taken(pilot: Pilot[Any], app: TrainwizApp, path: str, text: str) -> None:
    """Wait until the preset holds ``text`` (typed into the form) as ``training.<path>``."""
    await pilot_until(
        pilot,
        lambda: float(getattr(app.preset.training, path)) == float(text),
        what=f"the preset to take training.{path} = {text}",
        timeout=20,
        seen=lambda: getattr(app.preset.training, path),
    )


async def test_preset_saved_from_the_wizard_replays_to_the_same_plan(tmp_path: Path) -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="hyperparams")
    target = tmp_path / "session.yaml"
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, HyperparamsScreen) and not app.screen.workers,
            what="the Hyperparameters step with its workers done",
            timeout=20,
            seen=lambda: f"screen {type(app.screen).__name__}, workers {list(app.workers)}",
        )
        screen = app.screen
        assert isinstance(screen, HyperparamsScreen)
        for path, text in (
            ("per_device_train_batch_size", "2"),
            ("gradient_accumulation_steps", "3"),
            ("learning_rate", "0.001"),
            ("model_max_length", "128"),
        ):
            # A value the form took can rebuild the form (the plan's fields follow the
            # preset): the next field is looked up once it is mounted again.
            selector = f"#{field_id(path)}"
            await pilot_until(
                pilot,
                lambda selector=selector: bool(screen.query(selector)),
                what=f"the field {selector} on the form",
                timeout=20,
                seen=lambda: [w.id for w in screen.query(FormField)],
            )
            editor = screen.query_one(selector, FormField).editor
            assert isinstance(editor, Input)
            editor.value = text
            await _taken(pilot, app, path, text)
        assert app.preset.training.per_device_train_batch_size == 2
        await pilot.press("f6")
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, SavePresetDialog),
            what="the save dialog",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        dialog = app.screen
        assert isinstance(dialog, SavePresetDialog)
        dialog.query_one("#save-path", Input).value = str(target)
        dialog.query_one("#save-path", Input).focus()
        await pilot.press("enter")
        await pilot_until(
            pilot,
            lambda: target.exists() and not isinstance(app.screen, SavePresetDialog),
            what=f"the preset saved to {target} and the dialog closed",
            timeout=20,
            seen=lambda: (type(app.screen).__name__, target.exists()),
        )
        session_preset = app.preset
    replayed = load_preset(target)
    run_dir = tmp_path / "run"
    assert (
        build_plan(replayed, run_dir=run_dir).to_dict()
        == build_plan(session_preset, run_dir=run_dir).to_dict()
    )
    train = build_plan(replayed, run_dir=run_dir).step("train").argv
    assert train[train.index("--per_device_train_batch_size") + 1] == "2"
    assert train[train.index("--gradient_accumulation_steps") + 1] == "3"
    assert train[train.index("--model_max_length") + 1] == "128"
