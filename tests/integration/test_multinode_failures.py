"""Node and cluster failures named right, against the real sshd on 127.0.0.1 and the real
one-host Slurm (scripts/ci-sshd.sh, scripts/ci-slurm.sh).

- A node that does not answer (10.255.255.1: nothing routes there) fails every check that
  needs it, and a launch ends within the connect timeout naming that node (not node 0), with
  exit code 1 and the cause ``node_unreachable``.
- Slurm: the checks read the cluster (sinfo, scontrol, sbatch --test-only); a job the partition
  cannot hold says why while it pends; a user's own scancel is a stop; a job killed at its time
  limit has a cause of its own; ``stop`` counts the processes it ended on every node.
"""
# ruff: noqa: F811  (pytest fixtures imported from the other multi-node tests are arguments)

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.faults.helpers import role_pid
from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    cli,
    home,
    metric_lines,
    runs_json,
    wait_state,
    wait_steps,
)
from tests.integration.test_multinode_checks import NODE_CHECKS, free_port, node_checks
from tests.integration.test_multinode_slurm import job_state, slurm, slurm_preset  # noqa: F401
from tests.integration.test_multinode_ssh import (  # noqa: F401
    launch,
    ssh_keys,
    ssh_preset,
    sshd_port,
    wait_no_leftovers,
)

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]

DEAD = "10.255.255.1"  # a private address nothing answers on: ssh waits for its ConnectTimeout
FINAL = ("finished", "failed", "stopped")
SLURM_CHECKS = ["slurm_partition", "slurm_gpus", "slurm_time", "slurm_account"]


def dead_node_preset(tmp_path: Path, keys: dict[str, str], port: int) -> Path:
    nodes = [f"127.0.0.1:{port}", DEAD]
    return ssh_preset(tmp_path, keys, nodes, master_port=free_port(), ssh={"connect_timeout": 3})


def test_an_unreachable_node_fails_every_check_that_needs_it(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]
) -> None:
    code, results = node_checks(dead_node_preset(tmp_path, ssh_keys, sshd_port))
    assert code != 0
    for check in ("nodes_ssh", "nodes_alike", "nodes_shared", "rdzv_port"):
        result = results[check]
        assert result["status"] == "fail", (check, result["summary"])
        assert DEAD in result["summary"] and "every node" not in result["summary"]
        assert result["fix"] and "launch" in result["blocks"]
    assert "does not answer" in results["nodes_alike"]["fix"]
    assert set(results) == set(NODE_CHECKS)


def test_a_launch_with_an_unreachable_node_names_it_and_exits_1(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]
) -> None:
    preset = dead_node_preset(tmp_path, ssh_keys, sshd_port)
    started = time.monotonic()
    out = cli("launch", str(preset), check=False)
    took = time.monotonic() - started
    assert out.returncode == 1, out.stderr[-2000:]
    assert took < 3 + 30  # the connect timeout, then node 0's agent is stopped
    run = next(iter(runs_json().values()))
    assert run["state"] == "failed" and run["exit_code"] == 1
    assert run["cause"] == "node_unreachable"
    message = run["message"]
    assert f"node 1 ({DEAD}) cannot be reached over ssh" in message, message
    assert "node 0" not in message and "launch.ssh.port" in message
    log = (Path(os.environ["TRAINWIZ_HOME"]) / "runs" / run["run_id"] / "train.log").read_text()
    assert f"[node1 {DEAD}] " in log and f"{DEAD} port 22" in log  # ssh's own words, tagged
    diagnosis = json.loads(cli("diagnose", run["run_id"], "--json", check=False).stdout)
    assert any("node_unreachable" in json.dumps(f) for f in diagnosis["findings"])
    wait_no_leftovers(run["run_id"])


def test_stop_counts_the_processes_of_every_ssh_node(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]
) -> None:
    node = f"127.0.0.1:{sshd_port}"
    run_id, run_dir = launch(ssh_preset(tmp_path, ssh_keys, [node, node], max_steps=2000))
    wait_steps(run_dir, 1)
    out = cli("stop", run_id)
    # 2 agents, 2 trainers, 2 GPU samplers (this machine is both "nodes": counted once each)
    ended = int(out.stdout.split("trainwiz: ", 1)[1].split(" process(es) ended")[0])
    assert ended >= 6, out.stdout
    assert "none of the run is left" in out.stdout
    wait_no_leftovers(run_id)


def test_slurm_checks_read_the_cluster(slurm: str, tmp_path: Path) -> None:
    def results(preset: Path) -> dict[str, dict]:
        only = [arg for check in SLURM_CHECKS for arg in ("--only", check)]
        out = cli("check", "--preset", str(preset), *only, "--json", check=False)
        return {r["id"]: r for r in json.loads(out.stdout)["checks"]}

    good = results(slurm_preset(tmp_path, 4, partition="ci"))
    assert {k: r["status"] for k, r in good.items()} == {
        "slurm_partition": "ok",
        "slurm_gpus": "ok",
        "slurm_time": "ok",
        "slurm_account": "ok",
    }, good
    assert "partition ci: 1 node(s) for 1" in good["slurm_partition"]["summary"]
    assert f"on nodes {slurm}" in good["slurm_partition"]["summary"]  # sbatch --test-only
    missing = results(slurm_preset(tmp_path, 4, partition="nope"))["slurm_partition"]
    assert missing["status"] == "fail" and "partition 'nope' does not exist" in missing["summary"]
    assert missing["fix"] == "set launch.slurm.partition to one of: ci"
    path = slurm_preset(tmp_path, 4, partition="ci", gpus_per_node=2)
    data = yaml.safe_load(path.read_text())
    data["launch"]["nnodes"] = 2
    path.write_text(yaml.safe_dump(data))
    big = results(path)
    assert big["slurm_partition"]["status"] == "fail"
    assert "the partition has 1 node(s), the preset asks 2" in big["slurm_partition"]["summary"]
    assert big["slurm_partition"]["fix"].startswith("set launch.nnodes: 1")
    assert big["slurm_gpus"]["status"] == "fail"  # the partition's nodes have no gres GPUs
    assert "gpus_per_node is 2 but the partition's nodes have 0" in big["slurm_gpus"]["summary"]
    accounted = results(slurm_preset(tmp_path, 4, partition="ci", account="research"))
    assert accounted["slurm_account"]["status"] == "warn"  # no accounting storage here
    assert "account/QoS not verified" in accounted["slurm_account"]["summary"]


def test_a_job_the_partition_cannot_hold_says_why_it_pends(slurm: str, tmp_path: Path) -> None:
    path = slurm_preset(tmp_path, 4, partition="ci")
    data = yaml.safe_load(path.read_text())
    data["launch"]["nnodes"] = 2
    path.write_text(yaml.safe_dump(data))
    run_id, _run_dir = launch(path)
    deadline = time.monotonic() + 60
    run = runs_json()[run_id]
    while "the partition has" not in run["message"] and time.monotonic() < deadline:
        time.sleep(0.5)
        run = runs_json()[run_id]
    assert run["slurm_state"] == "PENDING"
    assert "the partition has 1 node, the preset asks 2" in run["message"], run["message"]
    stopped = json.loads(cli("stop", run_id, "--json").stdout)
    assert stopped["state"] == "stopped"


def test_a_users_own_scancel_is_a_stop(slurm: str, tmp_path: Path) -> None:
    run_id, run_dir = launch(slurm_preset(tmp_path, 5000, partition="ci"))
    wait_steps(run_dir, 1)
    job_id = str(runs_json()[run_id]["slurm_job_id"])
    subprocess.run(["scancel", job_id], check=True)
    final = wait_state(run_id, FINAL, timeout=120)
    assert final["state"] == "stopped" and final["cause"] == "stopped", final["message"]
    assert f"slurm job {job_id} cancelled" in final["message"]
    assert "from scontrol" in final["message"] or "from sacct" in final["message"]
    wait_no_leftovers(run_id)


def test_a_job_at_its_time_limit_has_its_own_cause(slurm: str, tmp_path: Path) -> None:
    run_id, run_dir = launch(slurm_preset(tmp_path, 50000, partition="ci", time_limit="1"))
    wait_steps(run_dir, 1)
    # The job only has to be alive at its limit, not busy: a stopped trainer waits out Slurm's
    # minute without burning a core the other tests need (Slurm's SIGKILL ends it all the same).
    os.kill(role_pid(run_dir, "trainer"), signal.SIGSTOP)
    final = wait_state(run_id, FINAL, timeout=240)
    assert final["state"] == "failed" and final["cause"] == "slurm_timeout", final["message"]
    assert final["slurm_state"] == "TIMEOUT"
    assert "reached its time limit (TIMEOUT launch.slurm.time_limit 1)" in final["message"]
    assert job_state(str(final["slurm_job_id"])) == "TIMEOUT"
    wait_no_leftovers(run_id)


def test_stop_counts_the_processes_of_a_slurm_job(slurm: str, tmp_path: Path) -> None:
    run_id, run_dir = launch(slurm_preset(tmp_path, 5000, partition="ci"))
    wait_steps(run_dir, 1)
    out = cli("stop", run_id)
    ended = int(out.stdout.split("trainwiz: ", 1)[1].split(" process(es) ended")[0])
    assert ended >= 3, out.stdout  # the agent, its trainer and the node's GPU sampler
    wait_no_leftovers(run_id)
