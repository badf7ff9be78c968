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


async def test_run_all_replays_and_opens_the_monitor_on_the_run() -> None:
    app = TrainwizApp(_preset(), "tiny-cpu")  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+r")
        for _ in range(200):  # it asks first, saying what runs and where
            await pilot.pause(0.05)
            if isinstance(app.screen, ConfirmDialog):
                break
        assert isinstance(app.screen, ConfirmDialog)
        assert app.current_run is None
        await pilot.press("y")
        screen = None
        for _ in range(200):
            await pilot.pause(0.05)
            if isinstance(app.screen, RunAllScreen):
                screen = app.screen
                break
        assert screen is not None
        for _ in range(3600):  # warnings on this machine: accept them as --yes would
            await pilot.pause(0.05)
            if app.current_run is not None:
                break
            if not screen.running and screen.result is not None and screen.result.failed_step:
                assert screen.result.failed_step == "checks", screen.result.reports
                await pilot.press("y")
        assert app.current_run is not None
        for _ in range(100):
            await pilot.pause(0.05)
            if app.current_step == "monitor":
                break
        assert app.current_step == "monitor"
        outcomes = {r.step: r.outcome for r in screen.result.reports}  # type: ignore[union-attr]
        assert outcomes["model"] in ("done", "skipped") and outcomes["launch"] == "done"
        assert "follow" not in outcomes  # the Monitor follows instead
        run_dir = app.current_run
    status = wait_for(run_dir, lambda s: s.final, 300)
    assert refresh(run_dir).state == "finished", status
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len([x for x in lines if x["kind"] == "step"]) == 8
