"""A run whose directory is deleted while it trains: its watcher ends torchrun and the
trainers (nobody could follow, stop or record it any more), and ``runs``/``stop ID`` still
know what is left of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backend import paths
from backend.runs.procs import deleted_runs
from tests.faults.helpers import (
    assert_nothing_left,
    cli,
    launch_detached,
    processes_of,
    short_preset,
    wait_steps,
)
from tests.waiting import wait_until


@pytest.mark.training
@pytest.mark.slow
def test_deleting_the_run_dir_ends_every_process_of_the_run(home: Path, tmp_path: Path) -> None:
    run_dir = launch_detached(short_preset(tmp_path, 5000))
    wait_steps(run_dir, 2)
    assert len(processes_of(run_dir)) >= 3  # watcher, torchrun, trainer
    shutil.rmtree(run_dir)
    assert_nothing_left(run_dir, timeout=30)


def test_stop_and_runs_handle_a_deleted_run_with_live_processes() -> None:
    run_id = "20260101-000000-gone-abcd"
    gone = paths.runs_dir() / run_id
    paths.runs_dir().mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TRAINWIZ_RUN_DIR": str(gone.resolve())}
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], env=env)
    try:
        # What `runs` and `stop` look for: a live process whose environment names the gone dir.
        wait_until(
            lambda: sleeper.pid in {p.pid for p in deleted_runs(paths.runs_dir()).get(run_id, [])},
            what=f"pid {sleeper.pid} seen as a live process of the deleted run {run_id}",
            timeout=20,
            seen=lambda: {"deleted runs": deleted_runs(paths.runs_dir()), "exit": sleeper.poll()},
        )
        listed = cli("runs")
        assert listed.returncode == 0
        assert f"run {run_id}: directory deleted, 1 process(es) still running" in listed.stderr
        stopped = cli("stop", run_id[:20], "--timeout", "5")
        assert stopped.returncode == 0, stopped.stderr
        assert "its directory was deleted; 1 process(es) ended, 0 left" in stopped.stdout
        assert sleeper.wait(timeout=10) != 0
    finally:
        sleeper.kill()
