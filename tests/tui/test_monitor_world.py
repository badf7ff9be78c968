"""The Monitor and ``trainwiz runs`` say when the trainer's world size is not the plan's.

A run whose preset plans 2 processes but whose trainer's ``start`` line says world size 1 (two
processes that each trained a copy: what HF does under torchrun on a CPU without ``use_cpu``)
shows the note on the Monitor's throughput panel and in ``runs``; a run that agrees shows none.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from textual.pilot import Pilot

from backend.rundir import RunStatus, create_run_dir, write_status
from screens.monitor import MonitorScreen
from tests.tui.test_monitor import LOG_2G, MonitorHarness, one_row_trace, replay_factory
from tests.waiting import pilot_until
from widgets.throughput import ThroughputMeter

ROOT = Path(__file__).resolve().parents[2]
NOTE = "the trainer trains with world size 1, the plan has 2 process(es)"


def run_with(trainer_world: int, planned: int) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"]["nproc_per_node"] = planned
    run_dir = create_run_dir("tiny-cpu", "host")
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(data))
    shutil.copy(LOG_2G, run_dir / "train.log")
    now = time.time()
    lines = [{"kind": "start", "time": now, "world_size": trainer_world, "n_params": 1000}]
    for step in (1, 2, 3):
        lines.append({"kind": "step", "step": step, "max_steps": 3, "epoch": step / 3,
                      "loss": 2.0 / step, "step_time_s": 0.5, "tokens": 2048,
                      "tokens_nonpad": 1024, "samples": 8, "tokens_per_s": 4096.0,
                      "tokens_nonpad_per_s": 2048.0, "samples_per_s": 16.0,
                      "time": now + step})  # fmt: skip
    lines.append({"kind": "end", "train_runtime": 3.0, "saved_to": None, "ok": True})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    write_status(
        run_dir,
        RunStatus(run_id=run_dir.name, preset="tiny-cpu", runner="host", state="finished"),
    )
    return run_dir


async def shown(pilot: Pilot, app: MonitorHarness, note: str = "") -> str:  # type: ignore[type-arg]
    """The meter's text once the metrics, the status and ``note`` have landed (the worker posts
    the note with the status after it read the start line; pumped, never a fixed sleep)."""

    def meter() -> ThroughputMeter:
        return app.screen.query_one(ThroughputMeter)

    def settled() -> bool:
        summary = meter().summary
        return bool(summary is not None and summary.finished and meter().state)

    await pilot_until(
        pilot,
        lambda: settled() and meter().note == note,
        what=f"the meter to show the finished run with note {note!r}",
        timeout=30,
        seen=lambda: f"state {meter().state!r}, note {meter().note!r}, summary {meter().summary}",
    )
    await pilot.pause()
    return str(meter().render())


def runs_text() -> str:
    out = subprocess.run(
        [sys.executable, "-m", "tui.cli", "runs"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


async def test_the_monitor_and_runs_say_the_trainer_trained_world_size_1_of_2(
    tmp_path: Path,
) -> None:
    run_dir = run_with(trainer_world=1, planned=2)
    screen = MonitorScreen(run_dir, gpu_source=replay_factory(one_row_trace(tmp_path)))
    app = MonitorHarness(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        text = await shown(pilot, app, NOTE)
        assert " ".join(NOTE.split()) in " ".join(text.split()), text  # wrapped at the panel
    line = next(x for x in runs_text().splitlines() if run_dir.name in x)
    assert f"({NOTE})" in line


async def test_an_agreeing_world_size_shows_no_note(tmp_path: Path) -> None:
    run_dir = run_with(trainer_world=2, planned=2)
    screen = MonitorScreen(run_dir, gpu_source=replay_factory(one_row_trace(tmp_path)))
    app = MonitorHarness(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        text = await shown(pilot, app)
        assert app.screen.query_one(ThroughputMeter).note == ""
        assert "world size" not in text
    assert "world size" not in runs_text()
