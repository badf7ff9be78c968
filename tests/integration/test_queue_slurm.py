"""A 2-variant sweep of a tiny Slurm preset through the queue, on the one-host cluster
(scripts/ci-slurm.sh): the queue hands both variants to Slurm at once, although --max-parallel is
1 and the first has not ended; `trainwiz queue` shows each item's Slurm job id and state; both
finish COMPLETED and `sweep show` ranks them.

"At once" is made certain, not left to timing: the preset submits its jobs held (sbatch
``--hold``), so neither job can start, let alone end, until the test releases them; the second
variant's job must exist while the first's is still held PENDING. A queue that waited for the
first variant's end (the local --max-parallel rule) would never submit the second.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend import paths
from backend.queue.ops import listing
from backend.queue.service import holder
from backend.rundir import RunDir
from tests.integration.test_multinode_slurm import (  # noqa: F401 (fixtures)
    job_state,
    slurm,
    slurm_preset,
)
from tests.integration.test_multinode_ssh import wait_no_leftovers
from tests.integration.test_queue_sweep import items
from tests.trainwiz_cli import cli
from tests.waiting import wait_until

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("slurm")]


def both_submitted() -> dict[int, Any] | None:
    """The queue's rows (as `trainwiz queue --json` has them) once both carry a Slurm job id."""
    rows = {row.id: row for row in listing()["items"] if row.slurm_job_id}
    return rows if len(rows) == 2 else None


def scontrol(*argv: str) -> str:
    done = subprocess.run(["scontrol", *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def no_held_jobs_left() -> Iterator[None]:
    """A failing test must not leave held jobs on the shared cluster: the queue is paused (no
    variant is submitted after the test), and the job of every run not ended is cancelled once
    no launch is under way."""
    yield
    cli("queue", "pause", check=False)
    wait_until(lambda: all(i.state != "starting" for i in items()), timeout=120,
               what="no launch under way", seen=lambda: [(i.id, i.state) for i in items()])  # fmt: skip
    for item in items():
        status = RunDir(paths.runs_dir() / str(item.run_id)).status_dict() if item.run_id else None
        job = (status or {}).get("slurm_job_id")
        if job and not item.final:
            subprocess.run(["scancel", str(job)], capture_output=True, timeout=60)


@pytest.mark.usefixtures("no_held_jobs_left")
def test_a_slurm_sweep_submits_every_variant_at_once_and_shows_their_jobs(tmp_path: Path) -> None:
    # --oversubscribe: both jobs may share the cluster's 2 CPUs (other suites' jobs too).
    base = slurm_preset(tmp_path, 4, partition="ci", extra_options=["--oversubscribe", "--hold"])
    done = cli("sweep", str(base), "--set", "training.learning_rate=1e-4,2e-4",
               "--max-parallel", "1", "--json")  # fmt: skip
    sweep = json.loads(done.stdout)
    assert [label for label, _i, _f in sweep["queued"]] == [
        "learning_rate=1e-4", "learning_rate=2e-4"]  # fmt: skip

    rows = wait_until(both_submitted, timeout=120, interval=0.5,
                      what="both variants submitted to Slurm",
                      seen=lambda: [(i.id, i.state, i.run_id, i.message) for i in items()])  # fmt: skip
    jobs = [str(rows[i.id].slurm_job_id) for i in items()]
    # Both submitted while both are held: neither could have ended before the other was sent.
    assert [job_state(job) for job in jobs] == ["PENDING", "PENDING"]
    for job in jobs:
        assert "Reason=JobHeldUser" in scontrol("-o", "show", "job", job)
    listed = json.loads(cli("queue", "--json").stdout)["items"]
    assert [(r["state"], r["scheduler"], r["gpus"], r["slurm_job_id"], r["slurm_state"])
            for r in listed] == [("running", "slurm", "slurm", job, "PENDING") for job in jobs]  # fmt: skip
    text = cli("queue").stdout
    for job in jobs:
        assert f"running · slurm {job} PENDING" in text, text

    scontrol("release", *jobs)
    wait_until(lambda: all(i.final for i in items()), what="both variants to end", timeout=480,
               interval=1.0, seen=lambda: [(i.id, i.state, i.run_id) for i in items()])  # fmt: skip
    ended = items()
    for item in ended:
        log = (paths.runs_dir() / str(item.run_id) / "train.log").read_text()
        assert item.state == "finished", (item.message, log[-3000:])
    assert [job_state(job) for job in jobs] == ["COMPLETED", "COMPLETED"]
    listed = json.loads(cli("queue", "--json").stdout)["items"]
    assert [(r["state"], r["slurm_job_id"], r["slurm_state"]) for r in listed] == [
        ("finished", job, "COMPLETED") for job in jobs]  # fmt: skip
    text = cli("queue").stdout
    for job in jobs:
        assert f"finished · slurm {job} COMPLETED" in text, text

    shown = json.loads(cli("sweep", "show", sweep["id"], "--json").stdout)
    assert sorted(v["rank"] for v in shown["variants"]) == [1, 2]
    assert all(isinstance(v["value"], float) for v in shown["variants"])
    assert sorted(v["label"] for v in shown["variants"]) == [
        "learning_rate=1e-4", "learning_rate=2e-4"]  # fmt: skip
    values = [v["value"] for v in shown["variants"]]
    assert values == sorted(values)  # lower loss first
    wait_until(lambda: holder() is None, what="the scheduler to exit", timeout=60)
    for item in ended:
        wait_no_leftovers(str(item.run_id))
