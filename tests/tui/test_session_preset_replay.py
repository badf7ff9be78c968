"""A preset made through the wizard, saved, and replayed gives exactly the session's plan."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from backend.plan import build_plan
from backend.preset import load_preset
from screens.hyperparams import HyperparamsScreen, field_id
from screens.preset_picker import SavePresetDialog
from tui.app import TrainwizApp
from widgets.form_field import FormField


@pytest.fixture(autouse=True)
def _no_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import backend.planner.gpu as gpu

    monkeypatch.setattr(gpu, "detect_local", lambda: None)


async def test_preset_saved_from_the_wizard_replays_to_the_same_plan(tmp_path: Path) -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="hyperparams")
    target = tmp_path / "session.yaml"
    async with app.run_test(size=(160, 50)) as pilot:
        for _ in range(200):
            await pilot.pause(0.05)
            if isinstance(app.screen, HyperparamsScreen) and not app.screen.workers:
                break
        screen = app.screen
        assert isinstance(screen, HyperparamsScreen)
        for path, text in (
            ("per_device_train_batch_size", "2"),
            ("gradient_accumulation_steps", "3"),
            ("learning_rate", "0.001"),
            ("model_max_length", "128"),
        ):
            editor = screen.query_one(f"#{field_id(path)}", FormField).editor
            assert isinstance(editor, Input)
            editor.value = text
            await pilot.pause(0.05)
        assert app.preset.training.per_device_train_batch_size == 2
        await pilot.press("f6")
        for _ in range(100):
            await pilot.pause(0.05)
            if isinstance(app.screen, SavePresetDialog):
                break
        dialog = app.screen
        assert isinstance(dialog, SavePresetDialog)
        dialog.query_one("#save-path", Input).value = str(target)
        dialog.query_one("#save-path", Input).focus()
        await pilot.press("enter")
        for _ in range(100):
            await pilot.pause(0.05)
            if target.exists():
                break
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
