"""Two Slurm jobs of one preset at once on the one-host cluster (scripts/ci-slurm.sh): each job
chooses its rendezvous port on its head node, so both train and both finish. With the preset's
master_port as every job's port, the two c10d stores met on one port of the one node.

"At once" is made certain, not left to the scheduler: the first job is suspended (SIGSTOP through
``scontrol suspend``) with its store listening, the second job trains from start to end while it
is held, then the first is resumed and finishes. A scheduler that ran the jobs one after the other
(other suites' jobs holding the CPUs) would otherwise hide the collision.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    home,
    metric_lines,
    wait_state,
    wait_steps,
)
from tests.integration.test_multinode_slurm import (  # noqa: F401
    job_state,
    launch,
    slurm,
    slurm_preset,
)
from tests.integration.test_multinode_ssh import wait_no_leftovers
from tests.waiting import wait_until

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home", "slurm")]

ENDED = ("finished", "failed", "stopped")


def scontrol(*argv: str) -> None:
    subprocess.run(["scontrol", *argv], check=True, capture_output=True, text=True, timeout=60)


def endpoint_port(run_dir: Path) -> int | None:
    """The port the job's batch script chose, from the line it logs before torchrun starts."""
    found = re.search(r"TRAINWIZ_RDZV_ENDPOINT=\S+:(\d+)", (run_dir / "train.log").read_text())
    return int(found.group(1)) if found else None


def test_two_jobs_of_one_preset_each_meet_on_a_port_of_their_own(tmp_path: Path) -> None:
    head = socket.gethostname().split(".")[0]  # the one-host cluster's node (the slurm fixture)
    # One preset file, one master_port for both. --oversubscribe: the two jobs may share the
    # cluster's 2 CPUs, so they run at the same time even while other jobs hold a CPU.
    preset = slurm_preset(tmp_path, 30, partition="ci", extra_options=["--oversubscribe"])
    first = launch(preset)
    wait_steps(first[1], 1, timeout=300)
    first_job = str(json.loads((first[1] / "status.json").read_text())["slurm_job_id"])
    first_port = wait_until(lambda: endpoint_port(first[1]), what="the first job's endpoint")
    scontrol("suspend", first_job)
    try:
        # The held job's store still accepts connections: its port is taken on the node.
        with socket.create_connection((head, first_port), timeout=10):
            pass
        second = launch(preset)
        second_final = wait_state(second[0], ENDED, timeout=420)
        assert job_state(first_job) == "SUSPENDED"  # held the whole time the second one ran
    finally:
        scontrol("resume", first_job)
    first_final = wait_state(first[0], ENDED, timeout=420)
    runs, finals = [first, second], [first_final, second_final]
    logs = [(run_dir / "train.log").read_bytes().decode() for _id, run_dir in runs]
    for final, log in zip(finals, logs):
        assert final["state"] == "finished", (final["message"], log[-3000:])
        assert final["slurm_state"] == "COMPLETED"
    ports = [final["master_port"] for final in finals]
    assert all(isinstance(port, int) for port in ports) and ports[0] != ports[1], ports
    assert ports[0] == first_port
    for final, log, port in zip(finals, logs, ports):
        assert final["rdzv_endpoint"] == f"{head}:{port}"
        # the batch log said it, and torchrun on the node was given exactly that endpoint
        assert f"TRAINWIZ_RDZV_ENDPOINT={head}:{port}" in log
        assert re.findall(r"rdzv_endpoint\s*:\s*(\S+)", log) == [f"{head}:{port}"]
    for _id, run_dir in runs:
        assert sum(1 for m in metric_lines(run_dir) if m["kind"] == "step") == 30
    for run_id, _dir in runs:
        wait_no_leftovers(run_id)
