"""Run all in the wizard: the CLI's replay pipeline, ending on the Monitor with a live run."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml

from backend.preset import parse_preset_text
from backend.runs import refresh, wait_for
from screens.dialogs import ConfirmDialog
from screens.replay import RunAllScreen
from tests.waiting import pilot_until
from tui.app import TrainwizApp

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _preset() -> object:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        data["launch"]["master_port"] = sock.getsockname()[1]
    data["training"]["max_steps"] = 8
    return parse_preset_text(yaml.safe_dump(data))


async def test_run_all_replays_and_opens_the_monitor_on_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The Run all screen is taken when it is made, not looked for on top: Pilot's press waits
    # for the process to go quiet (up to seconds while the replay's worker is busy), and on a
    # fast pipeline the screen can already have handed over to the Monitor by then.
    made: list[RunAllScreen] = []
    make = RunAllScreen.__init__

    def recorded(self: RunAllScreen, *args: object, **kwargs: object) -> None:
        make(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(RunAllScreen, "__init__", recorded)
    app = TrainwizApp(_preset(), "tiny-cpu")  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+r")
        await pilot_until(  # it asks first, saying what runs and where
            pilot,
            lambda: isinstance(app.screen, ConfirmDialog),
            what="Run all's confirmation",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        assert isinstance(app.screen, ConfirmDialog)
        assert app.current_run is None
        await pilot.press("y")
        await pilot_until(
            pilot,
            lambda: made,
            what="the Run all screen",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        screen = made[0]

        def stopped() -> bool:
            result = screen.result
            return not screen.running and result is not None and bool(result.failed_step)

        def status() -> str:
            try:
                said = screen.query_one("#run-all-status").render()
            except Exception as exc:  # the screen is gone already: say which is on top
                said = type(exc).__name__
            return f"{type(app.screen).__name__}: {said}"

        for _attempt in range(3):  # warnings on this machine: accept them as --yes would
            await pilot_until(
                pilot,
                lambda: app.current_run is not None or stopped(),
                what="Run all to launch the run (or stop at a step)",
                timeout=180,  # the real pipeline: checks, the tiny model, the launch
                seen=status,
            )
            if app.current_run is not None:
                break
            assert screen.result is not None
            assert screen.result.failed_step == "checks", screen.result.reports
            await pilot.press("y")
        assert app.current_run is not None
        await pilot_until(
            pilot,
            lambda: app.current_step == "monitor",
            what="the Monitor step on the run",
            timeout=20,
            seen=lambda: f"step {app.current_step!r}, screen {type(app.screen).__name__}",
        )
        assert app.current_step == "monitor"
        outcomes = {r.step: r.outcome for r in screen.result.reports}  # type: ignore[union-attr]
        assert outcomes["model"] in ("done", "skipped") and outcomes["launch"] == "done"
        assert "follow" not in outcomes  # the Monitor follows instead
        run_dir = app.current_run
    status = wait_for(run_dir, lambda s: s.final, 300)
    assert refresh(run_dir).state == "finished", status
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len([x for x in lines if x["kind"] == "step"]) == 8
