"""Snapshots of the Troubleshoot view on a real failed log (FastChat #1781, CUDA OOM on A100-40G)
diagnosed against the shipped vicuna-7b-4xa100-40g preset, and of the fix review dialog."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from textual.app import App
from textual.pilot import Pilot
from textual.widgets import OptionList

from screens.fix_review import FixReviewDialog
from screens.troubleshoot import TroubleshootScreen
from tests.waiting import pilot_until

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[2]
RUN_ID = "20261130-040000-vicuna-7b-4xa100-40g"


class _Host(App[None]):
    """The view alone (the wizard's first step runs live checks), styled like the wizard."""

    CSS_PATH = str(REPO / "tui" / "app.tcss")

    def on_mount(self) -> None:
        self.push_screen(TroubleshootScreen(run_id=RUN_ID))


def _make_run() -> None:
    run = Path(os.environ["TRAINWIZ_HOME"]) / "runs" / RUN_ID
    run.mkdir(parents=True)
    shutil.copy(
        FIXTURES / "logcorpus/cuda_oom/fastchat-1781-vicuna7b-a100-40g.log", run / "train.log"
    )
    shutil.copy(REPO / "presets/vicuna-7b-4xa100-40g.yaml", run / "preset.yaml")


async def _diagnosed(pilot: Pilot[Any]) -> None:
    app = pilot.app

    def diagnosis() -> object:
        screen = app.screen
        return screen.diagnosis if isinstance(screen, TroubleshootScreen) else None

    def status() -> str:
        found = app.screen.query("#ts-status")
        return str(found.first().render()) if found else type(app.screen).__name__

    await pilot_until(pilot, diagnosis, what="the diagnosis", timeout=30, seen=status)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()  # the first finding's highlight (a message) shows its fixes again


def test_troubleshoot_120x40(snap_compare: Any) -> None:
    _make_run()
    assert snap_compare(_Host(), terminal_size=(120, 40), run_before=_diagnosed)


def test_troubleshoot_fix_review_120x40(snap_compare: Any) -> None:
    _make_run()

    async def review(pilot: Pilot[Any]) -> None:
        await _diagnosed(pilot)
        fixes = pilot.app.screen.query_one("#ts-fixes", OptionList)
        fixes.focus()
        fixes.highlighted = 1  # halve the per-device batch, double accumulation
        await pilot.press("enter")
        await pilot_until(
            pilot,
            lambda: isinstance(pilot.app.screen, FixReviewDialog) and pilot.app.screen.is_mounted,
            what="the fix review dialog",
            timeout=20,
            seen=lambda: type(pilot.app.screen).__name__,
        )

    assert snap_compare(_Host(), terminal_size=(120, 40), run_before=review)
