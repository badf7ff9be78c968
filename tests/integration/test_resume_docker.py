"""`trainwiz resume` of a run launched with the Docker runner (real dockerd, real tiny training).

The trainer is SIGKILLed inside its container after a complete checkpoint (from the host, as the
kernel's OOM killer would: the container's processes are the host kernel's), the run fails,
``trainwiz resume`` starts attempt 2 in a new container from that checkpoint, and the run ends
at the final step with one continuous loss series; attempt 1's exited container is removed (its
output is in train.log already), so a resumed run leaves one container, not one per attempt.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from backend.entry.checkpoints import MARKER
from backend.monitor.metrics import RunStart, StepRecord, continued_series, read_events
from backend.runs import wait_for
from backend.runs.launch import launch
from tests.integration.test_launch_docker import (  # noqa: F401 (fixture)
    docker_client,
    docker_preset,
)
from tests.integration.test_launch_host import ROOT
from tests.integration.test_resume_host import worker_pids

pytestmark = [pytest.mark.docker, pytest.mark.training, pytest.mark.slow]

STEPS = 40


def kill_trainer_after_checkpoint(run_dir: Path, timeout: float = 600) -> int:
    """SIGKILL the training worker in the container once a complete checkpoint exists."""
    from backend.runs import read_status

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = read_status(run_dir)
        if status.final:
            log = (run_dir / "train.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"the run ended before a checkpoint: {status.message}\n{log}")
        if list((run_dir / "output").glob(f"checkpoint-*/{MARKER}")):
            pids = worker_pids(run_dir)  # the container's processes, seen from the host
            if pids:
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                steps = [e.step for e in read_events(run_dir / "metrics.jsonl")
                         if isinstance(e, StepRecord)]  # fmt: skip
                return steps[-1] if steps else 0
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint in {run_dir} within {timeout} s")


def test_sigkill_in_the_container_then_resume(docker_client, tmp_path: Path) -> None:  # noqa: F811
    from backend.diagnosis.build_log import ensure_env_image
    from backend.model.tiny import make_tiny

    home = Path(os.environ["TRAINWIZ_HOME"])
    preset = docker_preset(
        home,
        command_preset=False,
        max_steps=STEPS,
        save_strategy="steps",
        save_steps=10,
        save_total_limit=2,
        seed=11,
    )
    preset.container.network = "host"  # the seed's --net host: attempt 2 needs a free port too
    make_tiny(home / "models" / "tiny-llama", preset.model.tiny)
    ensure_env_image(preset)
    run_dir = launch(preset).run_dir
    containers = []
    try:
        killed_at = kill_trainer_after_checkpoint(run_dir)
        failed = wait_for(run_dir, lambda s: s.final, 120)
        assert failed.state == "failed", (run_dir / "train.log").read_text()[-3000:]
        first = failed.container_id
        assert first and killed_at < STEPS
        containers.append(first)

        out = subprocess.run(  # follows the log to the end (a container start, a tiny training)
            [sys.executable, "-m", "tui.cli", "resume", run_dir.name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert out.returncode == 0 and "finished: finished" in out.stderr, out.stderr
        assert "steps, loss" in out.stderr.splitlines()[-1], out.stderr  # launch's summary line
        status = json.loads((run_dir / "status.json").read_text())
        assert status["state"] == "finished"
        second = status["container_id"]
        containers.append(second)
        assert second and second != first
        with pytest.raises(docker.errors.NotFound):  # attempt 1's container is gone
            docker_client.containers.get(first)

        events = read_events(run_dir / "metrics.jsonl")
        starts = [e for e in events if isinstance(e, RunStart)]
        assert [s.attempt for s in starts] == [1, 2]
        resumed_from = starts[1].resumed_from
        assert resumed_from is not None and resumed_from % 10 == 0 and resumed_from <= killed_at
        steps, _ = continued_series(events)
        assert [s.step for s in steps] == list(range(1, STEPS + 1))  # no gap, no repeat
        assert {s.attempt for s in steps if s.step > resumed_from} == {2}
        attempts = json.loads((run_dir / "attempts.json").read_text())
        assert [(a["attempt"], a["how"]) for a in attempts] == [(1, "launch"), (2, "resume")]
        assert attempts[0]["exit_code"] not in (0, None)
        assert attempts[1]["exit_code"] == 0 and attempts[1]["resumed_from"] == resumed_from
        assert (run_dir / "output" / "model.safetensors").is_file()
    finally:
        for cid in containers:
            try:
                docker_client.containers.get(cid).remove(force=True)
            except docker.errors.NotFound:
                pass
        shutil.rmtree(run_dir / "output", ignore_errors=True)  # written as root in the container
