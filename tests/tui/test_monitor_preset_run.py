"""The wizard opened on a preset whose run is over shows that run on the Monitor.

After the README's quick start (`trainwiz replay presets/tiny-cpu.yaml`, then the wizard on the
same preset) the Monitor used to say "No run to monitor". It shows the preset's newest run
(finished, failed or stopped), labelled as over, with its final figures (each one the value
``backend.monitor.figures`` gives for that run) and the trainer's world size (the run's start
record); ``u`` still picks another run. No training: the runs are written as they end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from backend.monitor.figures import read_figures
from backend.monitor.world import trainer_start
from backend.preset import load_preset
from backend.rundir import RunStatus, write_status
from backend.units import duration
from screens.monitor import MonitorScreen
from tests.tui.test_monitor_world import run_with
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from widgets.throughput import ThroughputMeter


def _ended(state: str, world: int) -> Path:
    """A tiny-cpu run that ended in ``state`` (its metrics, log and preset as a run leaves them)."""
    run_dir = run_with(trainer_world=world, planned=world)
    if state != "finished":
        write_status(run_dir, RunStatus(run_id=run_dir.name, preset="tiny-cpu", runner="host",
                                        state=state))  # fmt: skip
    return run_dir


def _text(app: TrainwizApp, selector: str) -> str:
    found = app.screen.query(selector)
    return str(found.first().render()) if found else f"no {selector} on {type(app.screen).__name__}"


async def _monitoring(pilot: Pilot[Any], app: TrainwizApp, run_dir: Path) -> MonitorScreen:
    """Wait until the Monitor shows ``run_dir`` with its final summary and its header filled."""

    def shown() -> bool:
        screen = app.screen
        if not isinstance(screen, MonitorScreen) or screen.run is None:
            return False
        meter = screen.query(ThroughputMeter)
        summary = meter.first().summary if meter else None
        return bool(
            screen.run.run_dir == run_dir
            and summary is not None
            and summary.finished
            and meter.first().state
            and "world size" in _text(app, "#monitor-run")
        )

    await pilot_until(
        pilot,
        shown,
        what=f"the Monitor to show {run_dir.name} with its final summary",
        timeout=30,
        seen=lambda: (_text(app, "#monitor-none"), _text(app, "#monitor-run")),
    )
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, MonitorScreen)
    return screen


async def test_the_monitor_shows_the_presets_newest_finished_run_with_its_figures() -> None:
    older = _ended("failed", world=1)
    newest = _ended("finished", world=2)
    other = run_with(trainer_world=1, planned=1)  # newer still, but another preset's
    record = json.loads((other / "status.json").read_text())
    (other / "status.json").write_text(json.dumps({**record, "preset": "tiny-cpu-lora"}))
    assert older.name < newest.name < other.name
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="monitor")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _monitoring(pilot, app, newest)
        assert app.current_run == newest
        header = " ".join(_text(app, "#monitor-run").split())
        assert newest.name in header and "finished" in header, header
        start = trainer_start(newest) or {}
        assert f"world size {start['world_size']}" in header and start["world_size"] == 2
        assert "u" in header and screen.check_action("runs", ()) is True  # u: another run
        meter = screen.query_one(ThroughputMeter)
        figures = read_figures(newest)
        summary = meter.summary
        assert summary is not None
        assert summary.run_real_tokens_per_s == figures.real_tokens_per_s
        assert summary.mean_loss == figures.mean_loss and summary.wall_s == figures.wall_s
        shown = " ".join(str(meter.render()).split())
        assert "Final summary" in shown
        assert f"real tok/s {figures.real_tokens_per_s:,.0f}" in shown, shown
        assert f"mean train loss {figures.mean_loss:.4g}" in shown, shown
        assert f"wall time {duration(figures.wall_s)}" in shown, shown


async def test_a_failed_newest_run_is_shown_and_labelled_failed() -> None:
    _ended("finished", world=1)
    newest = _ended("failed", world=1)
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="checks")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(
            pilot,
            lambda: app.current_run == newest,
            what="the wizard to find the preset's newest run",
            timeout=30,
            seen=lambda: app.current_run,
        )
        assert app.goto_step("monitor")
        await _monitoring(pilot, app, newest)
        header = " ".join(_text(app, "#monitor-run").split())
        assert newest.name in header and "failed" in header, header
        assert "No run to monitor" not in _text(app, "#monitor-none")
