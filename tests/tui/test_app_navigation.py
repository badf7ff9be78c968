"""Pilot tests: the wizard's steps in order, next/back, preset picker, bindings have ids."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from backend.checks.model import CheckResult
from backend.preset import list_shipped, load_preset
from backend.steps import STEP_IDS
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from tui.step_screens import STEP_SCREENS


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path / "home"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _app() -> TrainwizApp:
    """tiny-cpu on a free master_port: a shared CI machine may hold the preset's own port."""
    preset = load_preset("tiny-cpu")
    launch = preset.launch.model_copy(update={"master_port": _free_port()})
    return TrainwizApp(preset.model_copy(update={"launch": launch}), "tiny-cpu")


async def _settle(pilot: Pilot[Any], app: TrainwizApp, step: str) -> None:
    """Wait until the app shows ``step`` (screen switches are asynchronous; CI may be loaded)."""
    await pilot_until(
        pilot,
        lambda: app.current_step == step,
        what=f"the {step!r} step to show",
        timeout=20,
        seen=lambda: f"step {app.current_step!r}, screen {type(app.screen).__name__}",
    )


def _screen_name(app: TrainwizApp) -> str:
    return type(app.screen).__name__


async def test_next_and_back_walk_the_steps_in_order() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        ids = list(STEP_IDS)
        await _settle(pilot, app, ids[0])
        seen = [app.current_step]
        for step in ids[1:]:
            await pilot.press("ctrl+n")
            await _settle(pilot, app, step)
            seen.append(app.current_step)
        assert seen == ids
        await pilot.press("ctrl+n")  # past the last step: stays
        await pilot.pause()  # the key was handled in press(); nothing else is to come
        assert app.current_step == "monitor"
        await pilot.press("ctrl+b")
        await _settle(pilot, app, "launch")
        assert app.current_step == "launch"


async def test_preset_picker_loads_a_shipped_preset() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+o")
        await pilot_until(
            pilot,
            lambda: _screen_name(app) == "PresetPicker",
            what="the preset picker to open",
            timeout=20,
            seen=lambda: _screen_name(app),
        )
        names = [name for name, _ in list_shipped()]  # the picker lists them in this order
        await pilot.press(*["down"] * names.index("vicuna-13b-v1.3-8xa100"), "enter")
        await pilot_until(
            pilot,
            lambda: app.preset.name == "vicuna-13b-v1.3-8xa100",
            what="the picked preset to load",
            timeout=20,
            seen=lambda: f"preset {app.preset.name!r}, screen {_screen_name(app)}",
        )
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
        await pilot_until(
            pilot,
            lambda: _screen_name(app) == "PresetPicker",
            what="the preset picker to open",
            timeout=20,
            seen=lambda: _screen_name(app),
        )
        picker = app.screen
        picker.query_one("#picker-path").value = str(bad)
        await pilot.click("#picker-path")
        await pilot.press("enter")
        await pilot_until(
            pilot,
            lambda: f"{bad}:4:" in str(picker.query_one("#picker-error").render()),
            what="the picker to show the file's error line",
            timeout=20,
            seen=lambda: str(picker.query_one("#picker-error").render()),
        )
        error = str(picker.query_one("#picker-error").render())
        assert f"{bad}:4:" in error and "unknown key 'lr'" in error
        assert app.preset.name == "tiny-cpu"


def test_every_binding_has_an_id() -> None:
    for binding in TrainwizApp.BINDINGS:
        assert getattr(binding, "id", None), binding


def test_every_step_has_a_screen_entry() -> None:
    assert list(STEP_SCREENS) == list(STEP_IDS)


def _failed_check(blocks: list[str]) -> CheckResult:
    return CheckResult(id="nvidia_driver", status="fail", summary="no NVIDIA driver",
                       fix="install the driver", blocks=blocks)  # fmt: skip


async def test_a_blocked_step_opens_with_its_blockers_and_its_action_disabled() -> None:
    """Blocked means "can't run", not "can't look": Next reaches Launch, which says why."""
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot_until(  # the real checks ran
            pilot,
            lambda: app.machine.checks is not None,
            what="the machine checks to finish",
            timeout=30,
            seen=lambda: app.machine.checks,
        )
        app.goto_step("hyperparams")
        await _settle(pilot, app, "hyperparams")
        app.set_check_results([_failed_check(["launch"])])
        await pilot.press("ctrl+n")
        await _settle(pilot, app, "launch")
        assert app.current_step == "launch"
        banner = app.screen.query_one("#step-blockers")
        await pilot_until(
            pilot,
            lambda: banner.display,
            what="the Launch step's blockers banner to show",
            timeout=20,
            seen=lambda: str(banner.render()),
        )
        text = str(banner.render())
        assert "Launch is disabled" in text and "nvidia_driver" in text
        assert "install the driver" in text
        assert "✗" in str(app.screen.query_one("#steps").render())
        await pilot_until(
            pilot,
            lambda: getattr(app.screen, "plan", None) is not None,
            what="the Launch step's plan",
            timeout=20,
            seen=lambda: f"screen {_screen_name(app)}",
        )
        app.screen.action_launch()  # type: ignore[attr-defined]
        await pilot_until(
            pilot,
            lambda: any("nvidia_driver" in str(n.message) for n in app._notifications),
            what="a notification naming the blocking check",
            timeout=20,
            seen=lambda: (_screen_name(app), [str(n.message) for n in app._notifications]),
        )
        assert type(app.screen).__name__ == "LaunchScreen"  # no confirmation: refused
        assert any("nvidia_driver" in str(n.message) for n in app._notifications)


async def test_troubleshoot_opens_from_anywhere_and_relaunch_asks_first() -> None:
    from screens.troubleshoot import TroubleshootScreen

    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+t")
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, TroubleshootScreen),
            what="the Troubleshoot screen to open",
            timeout=20,
            seen=lambda: _screen_name(app),
        )
        assert isinstance(app.screen, TroubleshootScreen)
        fixed = app.preset.model_copy(update={"name": "tiny-cpu-fixed"})
        app.relaunch(fixed)
        await _settle(pilot, app, "launch")
        assert app.preset.name == "tiny-cpu-fixed"
        # the Launch step's own confirmation comes up; nothing has been launched
        await pilot_until(
            pilot,
            lambda: _screen_name(app) == "ConfirmDialog",
            what="the Launch step's confirmation",
            timeout=20,
            seen=lambda: _screen_name(app),
        )
        assert type(app.screen).__name__ == "ConfirmDialog"
        assert app.current_run is None
