"""Keys typed at once after Enter in the command palette: they reach the field the command
leaves the focus in, never the closing palette.

The keys are posted to the App the way a terminal delivers a burst (all queued before any is
handled, Enter first), not one by one with Pilot's wait between keys, which hid the loss.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual import events
from textual.command import CommandList, CommandPalette
from textual.pilot import Pilot

import backend.planner.gpu as planner_gpu
from backend.preset import load_preset
from screens.hyperparams import HyperparamsScreen, field_id
from tests.waiting import pilot_until
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


def _where(app: Any) -> str:
    """The screen shown and the focused widget."""
    return f"screen {type(app.screen).__name__}, focus {app.focused!r}"


def _options(app: Any) -> list[str]:
    """The palette's entries (empty when the palette is not shown)."""
    if not isinstance(app.screen, CommandPalette):
        return []
    return [str(option.prompt) for option in app.screen.query_one(CommandList).options]


async def _open(pilot: Pilot[Any], app: TrainwizApp) -> HyperparamsScreen:
    await pilot_until(
        pilot,
        lambda: isinstance(app.screen, HyperparamsScreen) and app.screen.settled,
        what="the Hyperparameters step with its side pane computed",
        timeout=20,
        seen=lambda: _where(app),
    )
    assert isinstance(app.screen, HyperparamsScreen)
    return app.screen


async def _palette(pilot: Pilot[Any], query: str, shown: str) -> None:
    await pilot.press("ctrl+p")
    await pilot.press(*query)
    await pilot_until(
        pilot,
        lambda: any(shown in option for option in _options(pilot.app)),
        what=f"the palette to list {shown!r}",
        timeout=20,
        seen=lambda: f"{_where(pilot.app)}, entries {_options(pilot.app)}",
    )


async def _gone(pilot: Pilot[Any], screen: HyperparamsScreen, path: str, value: str) -> None:
    """Wait until the palette has closed and the keys typed after Enter have reached ``path``."""
    await pilot_until(
        pilot,
        lambda: pilot.app.screen is screen and _value(screen, path) == value,
        what=f"the palette closed and {path} showing {value!r}",
        timeout=20,
        seen=lambda: f"{_where(pilot.app)}, {path} = {_value(screen, path)!r}",
    )


async def _rejected(pilot: Pilot[Any], screen: HyperparamsScreen) -> None:
    """Wait until the screen has heard of a value typed into a field that it rejects."""
    await pilot_until(
        pilot,
        screen.leave_problems,
        what="the typed value to be rejected",
        timeout=20,
        seen=lambda: f"learning_rate = {_value(screen, 'learning_rate')!r}",
    )


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


@pytest.mark.slow
async def test_keys_after_a_refused_run_all_land_in_the_rejected_field() -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="hyperparams")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _open(pilot, app)
        screen.focus_field("learning_rate")
        await pilot.press("end", *["backspace"] * 12, *"0x10")
        await _rejected(pilot, screen)
        assert screen.leave_problems()
        for round_number in range(3):
            await _palette(pilot, "Run all steps", "Run all steps (replay")
            _burst(app, "enter", "end", *["backspace"] * 8, *"2e-4")
            await _gone(pilot, screen, "learning_rate", "2e-4")
            assert _value(screen, "learning_rate") == "2e-4", round_number
            await pilot.press("end", *["backspace"] * 8, *"0x10")
            await _rejected(pilot, screen)


async def test_keys_after_an_enter_that_keeps_the_palette_open_go_to_the_palette() -> None:
    """Enter that runs nothing (no entry matches): the keys were meant for the palette."""
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="hyperparams")
    async with app.run_test(size=(120, 40)) as pilot:
        await _open(pilot, app)
        await pilot.press("ctrl+p")
        await pilot.press(*"zzqx")
        await pilot_until(  # the search is over: Enter then has nothing to run
            pilot,
            lambda: (
                [o.id for o in app.screen.query_one(CommandList).options]
                == [CommandPalette._NO_MATCHES]
            ),
            what="the palette to find no match for 'zzqx'",
            timeout=20,
            seen=lambda: f"{_where(app)}, entries {_options(app)}",
        )
        _burst(app, "enter", *"yy")
        await pilot_until(
            pilot,
            lambda: app.screen.query_one("CommandInput").value.endswith("yy"),  # type: ignore[attr-defined]
            what="the keys typed after Enter to reach the palette's input",
            timeout=20,
            seen=lambda: f"{_where(app)}, input {app.screen.query_one('CommandInput').value!r}",  # type: ignore[attr-defined]
        )
        palette = app.screen
        assert isinstance(palette, CommandPalette)
        assert palette.query_one("CommandInput").value == "zzqxyy"  # type: ignore[attr-defined]
