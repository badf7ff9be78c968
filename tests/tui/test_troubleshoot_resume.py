"""Troubleshoot on a run with a complete checkpoint: "resume" comes before any relaunch, and
choosing it is the Monitor's own Resume (its confirmation first, nothing started before it).

The run is the recorded real tiny run of tests/fixtures/resumeui (SIGKILLed after checkpoint-10,
which the classifier names host_oom).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from textual.widgets import OptionList, Static

from backend.preset import load_preset
from screens.dialogs import ConfirmDialog
from screens.monitor import MonitorScreen
from screens.troubleshoot import TroubleshootScreen
from tests.snapshots.test_run_actions_snapshot import recorded_run
from tests.waiting import pilot_until
from tui.app import TrainwizApp


async def test_resume_fix_first_and_it_opens_the_monitor_resume() -> None:
    run = recorded_run(Path(os.environ["TRAINWIZ_HOME"]))
    before = (run / "status.json").read_text()
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu")
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+t")
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, TroubleshootScreen),
            what="the Troubleshoot screen",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        screen = app.screen
        assert isinstance(screen, TroubleshootScreen)
        screen.query_one("#ts-runs", OptionList).focus()
        await pilot.press("enter")
        await pilot_until(
            pilot,
            lambda: screen.diagnosis is not None,
            what="the run's diagnosis",
            timeout=30,
            seen=lambda: str(screen.query_one("#ts-status", Static).render()),
        )
        await pilot.pause()  # the first finding's highlight (a message) shows its fixes again
        assert screen.diagnosis is not None
        top = screen.diagnosis.findings[0]
        assert top.severity == "error" and top.category == "host_oom"
        assert top.fixes[0].title == f"Resume from checkpoint-10: trainwiz resume {run.name}"
        fixes = screen.query_one("#ts-fixes", OptionList)
        first = str(fixes.get_option_at_index(0).prompt)
        assert "Resume from checkpoint-10" in first and "resume: asks first" in first

        fixes.focus()
        fixes.highlighted = 0
        await pilot.press("enter")
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, ConfirmDialog),
            what="the Monitor's Resume confirmation",
            timeout=20,
            seen=lambda: f"screen {type(app.screen).__name__}, step {app.current_step!r}",
        )
        assert isinstance(app.screen, ConfirmDialog), type(app.screen)
        assert app.current_run == run and app.current_step == "monitor"
        body = str(app.screen.query_one("#confirm-summary", Static).render())
        assert "Resume run" in body and "checkpoint-10" in body
        assert (run / "status.json").read_text() == before  # nothing starts before the yes
        await pilot.press("n")
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, MonitorScreen),
            what="n to close the confirmation onto the Monitor",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        assert isinstance(app.screen, MonitorScreen)
        assert json.loads((run / "status.json").read_text())["state"] == "failed"
        assert app.resume_requested is None
