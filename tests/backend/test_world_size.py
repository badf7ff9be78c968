"""The world size a run trained with (the trainer's start line) against the plan's processes:
``runs`` (text and --json) says when they differ, and says nothing when they agree."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import yaml

from backend.monitor.world import planned_world, world_fields, world_note
from backend.rundir import RunStatus, create_run_dir, write_status

ROOT = Path(__file__).resolve().parents[2]


def finished_run(nproc: int, trainer_world: int, **launch: object) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"].update(nproc_per_node=nproc, **launch)
    run_dir = create_run_dir("tiny-cpu", "host")
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(data))
    start = {"kind": "start", "time": time.time(), "world_size": trainer_world}
    (run_dir / "metrics.jsonl").write_text(json.dumps(start) + "\n")
    write_status(
        run_dir,
        RunStatus(run_id=run_dir.name, preset="tiny-cpu", runner="host", state="finished"),
    )
    return run_dir


def runs(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "tui.cli", "runs", *args], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_trainer_world_size_unlike_the_plan_is_said() -> None:
    run_dir = finished_run(nproc=2, trainer_world=1)
    fields = world_fields(run_dir)
    assert (fields["world_size"], fields["planned_world_size"]) == (1, 2)
    note = "the trainer trains with world size 1, the plan has 2 process(es)"
    assert fields["world_note"] == note
    assert f"({note})" in runs()
    listed = {r["run_id"]: r for r in json.loads(runs("--json"))}[run_dir.name]
    assert listed["world_note"] == note and listed["world_size"] == 1


def test_an_agreeing_world_size_says_nothing() -> None:
    run_dir = finished_run(nproc=2, trainer_world=2)
    assert world_fields(run_dir)["world_note"] == ""
    assert "world size" not in runs()


def test_slurm_tasks_count_in_the_plan() -> None:
    slurm = {"partition": "ci", "ntasks_per_node": 2}
    run_dir = finished_run(nproc=1, trainer_world=2, scheduler="slurm", runner="host", slurm=slurm)
    assert planned_world(run_dir) == 2 and world_fields(run_dir)["world_note"] == ""
    assert world_note(None, 2) == "" and world_note(4, None) == ""
