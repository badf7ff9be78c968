"""Two Slurm jobs of one preset at once on the one-host cluster (scripts/ci-slurm.sh): each job
chooses its rendezvous port on its head node, so both train and both finish. With the preset's
master_port as every job's port, the two c10d stores met on one port of the one node."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    home,
    metric_lines,
    wait_state,
    wait_steps,
)
from tests.integration.test_multinode_slurm import launch, slurm, slurm_preset  # noqa: F401
from tests.integration.test_multinode_ssh import wait_no_leftovers

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home", "slurm")]

ENDED = ("finished", "failed", "stopped")


def test_two_jobs_of_one_preset_each_meet_on_a_port_of_their_own(tmp_path: Path) -> None:
    head = socket.gethostname().split(".")[0]  # the one-host cluster's node (the slurm fixture)
    # One preset file, one master_port for both. --oversubscribe: the two jobs may share the
    # cluster's 2 CPUs, so they run at the same time even while other jobs hold a CPU.
    preset = slurm_preset(tmp_path, 30, partition="ci", extra_options=["--oversubscribe"])
    runs = [launch(preset), launch(preset)]
    for _run_id, run_dir in runs:
        wait_steps(run_dir, 1, timeout=300)
    finals = [wait_state(run_id, ENDED, timeout=420) for run_id, _dir in runs]
    logs = [(run_dir / "train.log").read_bytes().decode() for _id, run_dir in runs]
    for final, log in zip(finals, logs):
        assert final["state"] == "finished", (final["message"], log[-3000:])
        assert final["slurm_state"] == "COMPLETED"
    ports = [final["master_port"] for final in finals]
    assert all(isinstance(port, int) for port in ports) and ports[0] != ports[1], ports
    for final, log, port in zip(finals, logs, ports):
        assert final["rdzv_endpoint"] == f"{head}:{port}"
        # the batch log said it, and torchrun on the node was given exactly that endpoint
        assert f"TRAINWIZ_RDZV_ENDPOINT={head}:{port}" in log
        assert re.findall(r"rdzv_endpoint\s*:\s*(\S+)", log) == [f"{head}:{port}"]
    # They trained at the same time: each job's store was up while the other's was.
    spans = []
    for _id, run_dir in runs:
        times = [m["time"] for m in metric_lines(run_dir) if m["kind"] == "step"]
        assert len(times) == 30
        spans.append((times[0], times[-1]))
    assert max(s for s, _e in spans) < min(e for _s, e in spans), spans
    for run_id, _dir in runs:
        wait_no_leftovers(run_id)
