"""Pilot tests: the wizard's steps in order, next/back, preset picker, bindings have ids."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from backend.preset import load_preset
from tui.app import STEP_SCREENS, TrainwizApp
from widgets.step_indicator import STEPS


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path / "home"))


def _app() -> TrainwizApp:
    return TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu")


async def _settle(pilot: object, app: TrainwizApp, step: str, timeout: float = 20.0) -> None:
    """Wait until the app shows ``step`` (screen switches are asynchronous; CI may be loaded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while app.current_step != step and loop.time() < deadline:
        await pilot.pause(0.05)  # type: ignore[attr-defined]


async def test_next_and_back_walk_the_steps_in_order() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        ids = [s for s, _ in STEPS]
        await _settle(pilot, app, ids[0])
        seen = [app.current_step]
        for step in ids[1:]:
            await pilot.press("ctrl+n")
            await _settle(pilot, app, step)
            seen.append(app.current_step)
        assert seen == ids
        await pilot.press("ctrl+n")  # past the last step: stays
        await pilot.pause(0.1)
        assert app.current_step == "monitor"
        await pilot.press("ctrl+b")
        await _settle(pilot, app, "launch")
        assert app.current_step == "launch"


async def test_preset_picker_loads_a_shipped_preset() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+o")
        await pilot.pause(0.1)
        await pilot.press("down", "enter")  # second shipped preset
        await pilot.pause(0.1)
        assert app.preset.name == "vicuna-13b-v1.3-8xa100"
        assert app.sub_title == "preset: vicuna-13b-v1.3-8xa100"


async def test_preset_picker_shows_file_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "schema: 1\nname: b\nmodel: {source: local, dir: /m}\ntraining: {data_path: d, output_dir: o, lr: 1}\n"
    )
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+o")
        await pilot.pause(0.1)
        picker = app.screen
        picker.query_one("#picker-path").value = str(bad)
        await pilot.click("#picker-path")
        await pilot.press("enter")
        await pilot.pause(0.1)
        error = str(picker.query_one("#picker-error").render())
        assert f"{bad}:4:" in error and "unknown key 'lr'" in error
        assert app.preset.name == "tiny-cpu"


def test_every_binding_has_an_id() -> None:
    for binding in TrainwizApp.BINDINGS:
        assert getattr(binding, "id", None), binding


def test_every_step_has_a_screen_entry() -> None:
    assert list(STEP_SCREENS) == [s for s, _ in STEPS]


async def test_a_blocked_step_cannot_be_reached_with_next() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.goto_step("hyperparams")
        await _settle(pilot, app, "hyperparams")
        app.blocked = {"launch": ["nvidia_driver"]}
        await pilot.press("ctrl+n")
        await pilot.pause(0.1)
        assert app.current_step == "hyperparams"
        app.blocked = {}
        await pilot.press("ctrl+n")
        await _settle(pilot, app, "launch")
        assert app.current_step == "launch"


async def test_troubleshoot_opens_from_anywhere_and_relaunch_asks_first() -> None:
    from screens.troubleshoot import TroubleshootScreen

    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+t")
        for _ in range(100):
            if isinstance(app.screen, TroubleshootScreen):
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, TroubleshootScreen)
        fixed = app.preset.model_copy(update={"name": "tiny-cpu-fixed"})
        app.relaunch(fixed)
        await _settle(pilot, app, "launch")
        assert app.preset.name == "tiny-cpu-fixed"
        # the Launch step's own confirmation comes up; nothing has been launched
        for _ in range(100):
            if type(app.screen).__name__ == "ConfirmLaunch":
                break
            await pilot.pause(0.05)
        assert type(app.screen).__name__ == "ConfirmLaunch"
        assert app.current_run is None
