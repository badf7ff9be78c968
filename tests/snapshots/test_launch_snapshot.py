"""Snapshot of the Launch step on the seed-like Vicuna-7B preset (docker runner, 4 GPUs).

The environment image tag is a hash of the Images code's inputs, so it is pinned here; the
runs directory is a fixed path so the summary line does not change from run to run.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

import backend.images
import backend.images.build
from backend.preset import load_preset
from screens.dialogs import ConfirmDialog
from screens.launch import LaunchScreen
from tests.waiting import pilot_until
from tui.app import TrainwizApp


@pytest.fixture(autouse=True)
def _stable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", "/tmp/trainwiz-snapshot-home")
    pinned = lambda preset, host=None: "trainwiz-env:0123456789abcdef"  # noqa: E731
    monkeypatch.setattr(backend.images.build, "env_image_tag", pinned)
    monkeypatch.setattr(backend.images, "env_image_tag", pinned, raising=False)


async def _planned(pilot: Pilot[Any]) -> None:
    screen = pilot.app.screen
    assert isinstance(screen, LaunchScreen)
    await pilot_until(
        pilot,
        lambda: screen.plan is not None,
        what="the Launch step's plan",
        timeout=20,
        seen=lambda: str(screen.query_one("#launch-status").render()),
    )
    await pilot.pause()


async def confirming(pilot: Pilot[Any]) -> None:
    """Press l on the planned Launch step and wait for the confirmation to be up."""
    await _planned(pilot)
    await pilot.press("l")
    await pilot_until(
        pilot,
        lambda: isinstance(pilot.app.screen, ConfirmDialog) and pilot.app.screen.is_mounted,
        what="the launch's confirmation",
        timeout=20,
        seen=lambda: type(pilot.app.screen).__name__,
    )


def test_launch_plan_120x40(snap_compare: Any) -> None:
    app = TrainwizApp(
        load_preset("vicuna-7b-4xa100-40g"), "vicuna-7b-4xa100-40g", start_step="launch"
    )
    assert snap_compare(app, terminal_size=(120, 40), run_before=_planned)


def test_launch_confirm_80x24(snap_compare: Any) -> None:
    app = TrainwizApp(
        load_preset("vicuna-7b-4xa100-40g"), "vicuna-7b-4xa100-40g", start_step="launch"
    )

    assert snap_compare(app, terminal_size=(80, 24), run_before=confirming)
