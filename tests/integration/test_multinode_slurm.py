"""The Slurm launcher against a real Slurm: slurm-wlm + munge as a one-host cluster on this
machine (scripts/ci-slurm.sh), ``tiny-cpu`` with ``scheduler: slurm`` through sbatch and srun."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.runs.procs import pid_alive
from tests.faults.helpers import role_pid
from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    cli,
    home,
    metric_lines,
    runs_json,
    wait_state,
    wait_steps,
)
from tests.integration.test_multinode_ssh import free_port, wait_no_leftovers
from tests.waiting import wait_until

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def slurm() -> str:
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ci-slurm.sh")], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    return socket.gethostname().split(".")[0]


def slurm_preset(tmp_path: Path, max_steps: int, **slurm_block: object) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = "tiny-slurm"
    data["training"]["max_steps"] = max_steps
    # Each test's job its own rendezvous port, as test_data_parallel's: a Slurm job keeps the
    # preset's port (its head node is known only in the job), and two jobs on the one node with
    # the same port collide (seen when two test suites shared the cluster: the later job's
    # agent lost its c10d store).
    data["launch"].update(scheduler="slurm", nnodes=1, slurm={"time_limit": "20:00", **slurm_block},
                          master_port=free_port())  # fmt: skip
    path = tmp_path / "tiny-slurm.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def launch(preset: Path) -> tuple[str, Path]:
    started = json.loads(cli("launch", str(preset), "--detach", "--json").stdout)
    return started["run_id"], Path(started["run_dir"])


def job_state(job_id: str) -> str:
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, check=True
    )
    return out.stdout.split("JobState=", 1)[1].split()[0]


def test_tiny_cpu_trains_through_sbatch_and_srun(slurm: str, tmp_path: Path) -> None:
    run_id, run_dir = launch(slurm_preset(tmp_path, 8, partition="ci"))
    final = wait_state(run_id, ("finished", "failed", "stopped"), timeout=300)
    log = (run_dir / "train.log").read_bytes().decode()
    assert final["state"] == "finished", log[-3000:]
    steps = [m for m in metric_lines(run_dir) if m["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(1, 9))
    assert sum(s["loss"] for s in steps[-3:]) < sum(s["loss"] for s in steps[:3])
    job_id = final["slurm_job_id"]
    assert final["slurm_state"] == "COMPLETED" and final["slurm_nodes"] == slurm
    assert job_state(job_id) == "COMPLETED"
    assert f"[node0 {slurm}] " in log and f"slurm job {job_id}: RUNNING {slurm}" in log
    # The plan shows the script exactly as it was submitted.
    plan = json.loads((run_dir / "plan.json").read_text())
    shown = next(s for s in plan["steps"] if s["id"] == "slurm-script")["note"]
    assert shown + "\n" == (run_dir / "job.sbatch").read_text()
    assert "#SBATCH --partition=ci" in shown and "#SBATCH --time=20:00" in shown
    # The job script started one GPU sampler task per node (this CPU host: the no-GPU record),
    # it reported into the run and ended with the job; status.json tracked it.
    records = [json.loads(x) for x in (run_dir / "nodes/node0/gpu.jsonl").read_text().splitlines()]
    header = records[0]
    assert (header["kind"], header["node"], header["host"]) == ("header", "node0", slurm)
    assert header["state"] == "no_gpu" and any(r.get("gpus") == [] for r in records[1:])
    assert final["nodes"][0]["sampler"]["state"] == "stopped"  # its end line: the step ended
    assert records[-1] == {**records[-1], "kind": "end", "reason": "the training step ended"}
    assert final["nodes"][0]["sampler"]["pid"] == header["pid"]
    assert "--overlap" in shown and "gpusampler.py --node=auto" in shown
    wait_no_leftovers(run_id)


def test_stop_cancels_the_job(slurm: str, tmp_path: Path) -> None:
    run_id, run_dir = launch(slurm_preset(tmp_path, 5000))
    wait_steps(run_dir, 2)
    job_id = runs_json()[run_id]["slurm_job_id"]
    stopped = json.loads(cli("stop", run_id, "--json").stdout)
    assert stopped["state"] == "stopped", (run_dir / "train.log").read_text()[-3000:]
    assert job_state(job_id).startswith("CANCELLED")
    wait_no_leftovers(run_id)
    assert len([m for m in metric_lines(run_dir) if m["kind"] == "step"]) < 5000


def test_a_job_whose_watcher_is_gone_is_followed_through_slurm(slurm: str, tmp_path: Path) -> None:
    # Like a job started from another login: no watcher here, Slurm itself says how it goes.
    run_id, run_dir = launch(slurm_preset(tmp_path, 20))
    wait_steps(run_dir, 1)
    # Held while the watcher goes, so "running" is still true when asked: 20 tiny steps can
    # end before a loaded machine has killed the watcher and listed the runs.
    trainer = role_pid(run_dir, "trainer")
    os.kill(trainer, signal.SIGSTOP)
    status = runs_json()[run_id]
    watcher = status["watcher_pid"]
    os.kill(watcher, signal.SIGKILL)
    wait_until(  # SIGKILL lands asynchronously: `runs` must look at a watcher really gone
        lambda: not pid_alive(watcher),
        what=f"the SIGKILLed watcher pid {watcher} gone (or a zombie)",
        timeout=20,
        seen=lambda: Path(f"/proc/{watcher}/stat").read_text(),
    )
    assert runs_json()[run_id]["state"] == "running"
    os.kill(trainer, signal.SIGCONT)
    final = wait_state(run_id, ("finished", "failed", "stopped"), timeout=300)
    assert final["state"] == "finished", final["message"]
    assert "read from Slurm" in final["message"] and final["exit_code"] == 0


def test_a_bad_sbatch_option_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = slurm_preset(tmp_path, 4, extra_options=["--comment=$(reboot)"])
    out = cli("plan", str(path), check=False)
    assert out.returncode == 2
    assert "launch.slurm.extra_options" in out.stderr and "$(reboot)" in out.stderr


def cli_in(other_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as another login would run it: its own TRAINWIZ_HOME, no record of the run."""
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TRAINWIZ_HOME": str(other_home)},
    )


def test_attach_and_stop_by_job_id_from_another_home(slurm: str, tmp_path: Path) -> None:
    run_id, run_dir = launch(slurm_preset(tmp_path, 5000))
    wait_steps(run_dir, 1)
    job_id = str(runs_json()[run_id]["slurm_job_id"])
    here = json.loads(cli("attach", job_id, "--json").stdout)  # this home's record has it
    assert here["run_id"] == run_id and here["run_dir"] == str(run_dir)
    other = tmp_path / "other-home"
    other.mkdir()
    seen = cli_in(other, "attach", job_id, "--json")
    assert seen.returncode == 0, seen.stderr
    record = json.loads(seen.stdout)
    assert record["run_id"] == run_id and Path(record["run_dir"]) == run_dir.resolve()
    assert record["state"] == "running" and record["slurm_state"] == "RUNNING"
    assert record["slurm_nodes"] == slurm
    logs = cli_in(other, "logs", job_id)
    assert logs.returncode == 0 and f"[node0 {slurm}] " in logs.stdout
    stopped = cli_in(other, "stop", job_id, "--json")
    assert stopped.returncode == 0, stopped.stderr
    assert json.loads(stopped.stdout)["state"] == "stopped"
    assert job_state(job_id).startswith("CANCELLED")
    assert not (other / "runs").exists() or not any((other / "runs").iterdir())
    wait_no_leftovers(run_id)


def test_a_job_that_is_not_trainwizs_is_refused(slurm: str, tmp_path: Path) -> None:
    sbatch = ["sbatch", "--parsable", "--job-name=someone-else", f"--output={tmp_path}/o-%j.out"]
    job = subprocess.run(
        [*sbatch, "--wrap", "sleep 60"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.strip()
    try:
        out = cli("attach", job, "--json", check=False)
        assert out.returncode == 2
        assert f"Slurm job {job} ('someone-else') is not a trainwiz run" in out.stderr
        gone = cli("stop", "987654321", check=False)
        assert gone.returncode == 2 and "neither a run here nor a Slurm job" in gone.stderr
    finally:
        subprocess.run(["scancel", job], check=False)
