"""Launch is offered only once the current preset's checks have run, and never past a blocker.

Seen on the wizard: after ctrl+o to a GPU preset the Launch step still said "Press l to launch"
from the previous preset's checks, and kept saying it once the new preset's checks failed. Now
the status line says the checks are running (or have not run for this preset) and, once a check
blocks Launch, names that check instead of offering l. Real checks on this GPU-less machine.
"""

from __future__ import annotations

import socket
from typing import Any

from textual.pilot import Pilot

from backend.preset import list_shipped, load_preset
from backend.steps import blockers
from screens.launch import LaunchScreen
from tests.waiting import pilot_until
from tui.app import TrainwizApp

OFFER = "Press l to launch"
GPU_PRESET = "vicuna-7b-4xa100-40g"  # 4 A100s: the checks' nvidia_driver and gpus fail here


def _app(start_step: str) -> TrainwizApp:
    preset = load_preset("tiny-cpu")
    with socket.socket() as sock:  # a shared CI machine may hold the preset's own port
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    launch = preset.launch.model_copy(update={"master_port": port})
    return TrainwizApp(preset.model_copy(update={"launch": launch}), "tiny-cpu",
                       start_step=start_step)  # fmt: skip


def _status(app: TrainwizApp) -> str:
    screen = app.step_screen("launch")
    found = screen.query("#launch-status") if screen is not None else None
    return " ".join(str(found.first().render()).split()) if found else "<no Launch step yet>"


async def _until(pilot: Pilot[Any], app: TrainwizApp, check: Any, what: str) -> None:
    await pilot_until(pilot, check, what=what, timeout=40,
                      seen=lambda: (app.preset.name, app.machine.complete, _status(app)))  # fmt: skip


async def test_after_ctrl_o_launch_waits_for_the_new_presets_checks_and_names_the_blocker() -> None:
    app = _app("checks")
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, app, lambda: app.machine.checks and app.machine.complete,
                     "tiny-cpu's checks")  # fmt: skip
        assert app.goto_step("launch")
        await _until(pilot, app, lambda: OFFER in _status(app), "Launch offered for tiny-cpu")
        await pilot.press("ctrl+o")
        await _until(pilot, app, lambda: type(app.screen).__name__ == "PresetPicker", "picker")
        names = [name for name, _ in list_shipped()]  # the picker lists them in this order
        await pilot.press(*["down"] * names.index(GPU_PRESET), "enter")
        await _until(pilot, app, lambda: app.preset.name == GPU_PRESET, "the GPU preset")
        offered: list[str] = []

        def blocker_named() -> bool:
            text = _status(app)
            if OFFER in text:
                offered.append(text)
            found = blockers("launch", app.machine)
            return bool(app.machine.complete and found and found[0].id in text)

        assert OFFER not in _status(app), _status(app)  # not before the new preset's checks
        assert "checks" in _status(app)
        await _until(pilot, app, blocker_named, "the status line to name the blocking check")
        assert not offered, offered
        assert app.screen is app.step_screen("launch")  # all of it without leaving Launch
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await _until(pilot, app, lambda: screen.plan is not None, "the GPU preset's plan")
        assert OFFER not in _status(app) and "nvidia_driver" in _status(app), _status(app)


async def test_launch_says_the_checks_have_not_run_for_this_preset() -> None:
    app = _app("launch")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await _until(pilot, app, lambda: screen.plan is not None, "the plan")
        text = _status(app)
        assert OFFER not in text and "checks have not run for this preset" in text, text
