"""A run directory as launch leaves it once the run ended, without training: its status, preset,
launch record, log and (optionally) a checkpoint with its trainer state and trainwiz's marker.
Tests of what is done *after* a run (resume, diagnose, summaries) start from here."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from backend.entry.checkpoints import write_marker
from backend.rundir import RunStatus, write_status


def make_ended_run(
    tmp_path: Path, state: str, checkpoint: int | None, *, preset: str, log: str
) -> Path:
    """runs/20261201-000000-PRESET under ``tmp_path`` in ``state``; its output_dir is
    ``tmp_path/out`` and holds ``checkpoint-N`` when ``checkpoint`` is given."""
    run_dir = tmp_path / "runs" / f"20261201-000000-{preset}"
    run_dir.mkdir(parents=True)
    write_status(run_dir, RunStatus(run_id=run_dir.name, preset=preset, runner="host", state=state))
    out = tmp_path / "out"
    record = {
        "schema": 1,
        "name": preset,
        "model": {"source": "local", "dir": str(tmp_path / "m")},
        "launch": {"runner": "host", "device": "cpu"},
        "training": {"data_path": "d.json", "output_dir": str(out)},
    }
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(record))
    (run_dir / "launch.json").write_text(json.dumps({"runner": "host", "train": {"cwd": "/"}}))
    (run_dir / "train.log").write_text(log)
    if checkpoint is not None:
        path = out / f"checkpoint-{checkpoint}"
        path.mkdir(parents=True)
        (path / "trainer_state.json").write_text(json.dumps({"global_step": checkpoint}))
        write_marker(path, {"step": checkpoint})
    return run_dir
