"""Run records of resumable runs, without training: the diagnosis offers resume, resume refuses
what it must (docs/checkpoints.md). The trainings themselves are in
tests/integration/test_resume_host.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backend.errors import BadInput
from backend.runs.resume import latest_checkpoint, prepare_resume, read_attempts
from tests.run_records import make_ended_run
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.2 GiB is free.\n"
)


def make_run(tmp_path: Path, state: str, checkpoint: int | None) -> Path:
    return make_ended_run(tmp_path, state, checkpoint, preset="t", log="step 1\n" + OOM)


def diagnose(run_dir: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "diagnose", str(run_dir), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return dict(json.loads(proc.stdout))


def test_diagnosis_offers_resume_first_when_a_checkpoint_exists(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "failed", 20)
    (finding,) = [f for f in diagnose(run_dir)["findings"] if f["category"] == "cuda_oom"]
    first = finding["fixes"][0]
    assert first["title"] == f"Resume from checkpoint-20: trainwiz resume {run_dir.name}"
    assert first["changes"] == []
    assert len(finding["fixes"]) > 1  # the preset fixes stay, after it


def test_no_checkpoint_no_resume_fix(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "failed", None)
    (finding,) = [f for f in diagnose(run_dir)["findings"] if f["category"] == "cuda_oom"]
    assert not any(f["title"].startswith("Resume") for f in finding["fixes"])


def test_prepare_resume_refuses_while_a_trainer_outlives_its_run(tmp_path: Path) -> None:
    """torchrun's workers run in their own session: one can live on after the run was recorded
    failed. A resume then would put two trainers on one output_dir."""
    orphan_run = make_run(tmp_path / "a", "failed", 20)
    entry = orphan_run / "entry" / "train_entry.py"
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(entry)])
    try:
        # Popen returns once the child has begun its exec: for a moment after, the kernel shows
        # an empty command line (as it shows an empty environment: tests/faults/
        # test_garbled_status.py), so wait until the worker runs the entry, as a trainer would.
        wait_until(
            lambda: str(entry).encode() in Path(f"/proc/{worker.pid}/cmdline").read_bytes(),
            what=f"pid {worker.pid} running {entry}",
            timeout=20,
        )
        with pytest.raises(BadInput, match=f"{worker.pid} are still running"):
            prepare_resume(orphan_run)
    finally:
        worker.kill()
        worker.wait()
    assert read_attempts(orphan_run) == []  # refused: nothing recorded

    done = make_run(tmp_path / "b", "failed", 30)
    assert latest_checkpoint(done) == (30, tmp_path / "b" / "out" / "checkpoint-30")
    record = prepare_resume(done)
    assert record == {"attempt": 2, "how": "resume", "pending": True, "resumed_from": 30}
    assert [a["attempt"] for a in read_attempts(done)] == [1, 2]
    status = json.loads((done / "status.json").read_text())
    assert status["state"] == "starting" and status["watcher_pid"] is None
