"""Keys typed at once after Enter in the command palette: they reach the field the command
leaves the focus in, never the closing palette.

The keys are posted to the App the way a terminal delivers a burst (all queued before any is
handled, Enter first), not one by one with Pilot's wait between keys, which hid the loss.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual import events
from textual.command import CommandPalette
from textual.pilot import Pilot

import backend.planner.gpu as planner_gpu
from backend.preset import load_preset
from screens.hyperparams import HyperparamsScreen, field_id
from tui.app import TrainwizApp
from widgets.form_field import FormField


@pytest.fixture(autouse=True)
def _no_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planner_gpu, "detect_local", lambda: None)


def _burst(app: TrainwizApp, *keys: str) -> None:
    """Every key queued at once, as one tmux send-keys (or a fast typist) delivers them."""
    assert app._driver is not None
    for key in keys:
        event = events.Key(key, key if len(key) == 1 else None)
        event.set_sender(app)
        app._driver.send_message(event)


def _value(screen: HyperparamsScreen, path: str) -> str:
    return str(getattr(screen.query_one(f"#{field_id(path)}", FormField).editor, "value", ""))


async def _open(pilot: Pilot[Any], app: TrainwizApp) -> HyperparamsScreen:
    for _ in range(200):
        await pilot.pause(0.05)
        if isinstance(app.screen, HyperparamsScreen) and app.screen.settled:
            break
    assert isinstance(app.screen, HyperparamsScreen)
    return app.screen


async def _palette(pilot: Pilot[Any], query: str, shown: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.press(*query)
    for _ in range(100):
        await pilot.pause(0.05)
        palette = pilot.app.screen
        if isinstance(palette, CommandPalette) and any(
            shown in str(option.prompt) for option in palette.query_one("CommandList").options
        ):
            return
    raise AssertionError(f"the palette never listed {shown!r}")


async def _gone(pilot: Pilot[Any], screen: HyperparamsScreen, path: str, value: str) -> None:
    for _ in range(100):
        await pilot.pause(0.05)
        if pilot.app.screen is screen and _value(screen, path) == value:
            return


async def test_keys_after_edit_field_land_in_that_field() -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="hyperparams")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(pilot, app)
        for path, value in (("num_train_epochs", "7"), ("learning_rate", "3e-4")):
            await _palette(pilot, f"Edit field: {path}", f"Edit field: {path}")
            _burst(app, "enter", "end", *["backspace"] * 12, *value)
            await _gone(pilot, screen, path, value)
            assert _value(screen, path) == value
            assert not isinstance(app.screen, CommandPalette)


async def test_keys_after_a_refused_run_all_land_in_the_rejected_field() -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="hyperparams")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(pilot, app)
        screen.focus_field("learning_rate")
        await pilot.press("end", *["backspace"] * 12, *"0x10")
        await pilot.pause(0.3)
        assert screen.leave_problems()
        for round_number in range(3):
            await _palette(pilot, "Run all steps", "Run all steps (replay")
            _burst(app, "enter", "end", *["backspace"] * 8, *"2e-4")
            await _gone(pilot, screen, "learning_rate", "2e-4")
            assert _value(screen, "learning_rate") == "2e-4", round_number
            await pilot.press("end", *["backspace"] * 8, *"0x10")
            await pilot.pause(0.3)


async def test_keys_after_an_enter_that_keeps_the_palette_open_go_to_the_palette() -> None:
    """Enter that runs nothing (no entry matches): the keys were meant for the palette."""
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="hyperparams")
    async with app.run_test(size=(120, 40)) as pilot:
        await _open(pilot, app)
        await pilot.press("ctrl+p")
        await pilot.press(*"zzqx")
        await pilot.pause(0.5)
        _burst(app, "enter", *"yy")
        for _ in range(60):
            await pilot.pause(0.05)
            palette = app.screen
            if isinstance(palette, CommandPalette) and palette.query_one(
                "CommandInput"
            ).value.endswith("yy"):  # type: ignore[attr-defined]
                break
        palette = app.screen
        assert isinstance(palette, CommandPalette)
        assert palette.query_one("CommandInput").value == "zzqxyy"  # type: ignore[attr-defined]
