"""Data parallelism that is real, not N copies: tiny-cpu for one epoch on 2 ranks (gloo), as
1 node x 2 processes (host runner), 2 ssh "nodes" on 127.0.0.1 (scripts/ci-sshd.sh) and 2
Slurm tasks on the one-host cluster (scripts/ci-slurm.sh).

What proves it, from what the ranks themselves wrote (never the plan):
- the epoch takes half the optimizer steps of one process (200 conversations / (2 x 4) = 25);
- the sample ids each rank read (``ranks/rank<R>.samples``) are disjoint and cover the data set
  exactly once;
- every rank ends holding the same parameters (``ranks/rank<R>.json``: sha256 of the bytes);
- samples and tokens per step are counted once (8 samples a step, 200 over the epoch, the
  real tokens of the epoch exactly once);
- the start line's world size is the trainer's (``parallel_mode`` distributed, backend gloo),
  and ``runs`` says it matches the plan.
"""
# ruff: noqa: F811  (pytest fixtures imported from the other multi-node tests are arguments)

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    cli,
    home,
    metric_lines,
    runs_json,
    wait_state,
    wait_steps,
)
from tests.integration.test_multinode_slurm import slurm  # noqa: F401
from tests.integration.test_multinode_ssh import (  # noqa: F401
    free_port,
    ssh_keys,
    ssh_preset,
    sshd_port,
    wait_no_leftovers,
)

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]

ROOT = Path(__file__).resolve().parents[2]
RECORDS, BATCH = 200, 4  # the bundled sample conversations, tiny-cpu's per-device batch
FINAL = ("finished", "failed", "stopped")


def one_epoch(data: dict) -> dict:
    data["training"]["num_train_epochs"] = 1
    data["training"].pop("max_steps", None)
    return data


def host_preset(tmp_path: Path, nproc: int) -> Path:
    data = one_epoch(yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text()))
    data["name"] = f"tiny-{nproc}p"
    data["launch"].update(nproc_per_node=nproc, master_port=free_port())  # not every test's
    path = tmp_path / f"tiny-{nproc}p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def launch(preset: Path) -> tuple[str, Path]:
    started = json.loads(cli("launch", str(preset), "--detach", "--json").stdout)
    return started["run_id"], Path(started["run_dir"])


def rank_samples(run_dir: Path, rank: int) -> list[int]:
    return [int(x) for x in (run_dir / "ranks" / f"rank{rank}.samples").read_text().split()]


def rank_record(run_dir: Path, rank: int) -> dict:
    return json.loads((run_dir / "ranks" / f"rank{rank}.json").read_text())


def assert_data_parallel(run_id: str, run_dir: Path, world: int) -> None:
    lines = metric_lines(run_dir)
    start, steps = lines[0], [m for m in lines if m["kind"] == "step"]
    assert start["kind"] == "start" and lines[-1]["kind"] == "end" and lines[-1]["ok"]
    # The trainer's own world size, and how it trains.
    assert start["world_size"] == world and start["launched_world_size"] == world
    assert (start["parallel_mode"], start["dist_backend"]) == ("distributed", "gloo")
    # One epoch takes 1/world of one process's steps.
    assert len(steps) == RECORDS // (world * BATCH) == start["steps_per_epoch"]
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    # The ranks read disjoint samples that cover the data set exactly once.
    read = [rank_samples(run_dir, r) for r in range(world)]
    assert all(len(ids) == RECORDS // world for ids in read)
    assert sorted(i for ids in read for i in ids) == list(range(RECORDS))
    # One model: every rank ends with the same parameters, after the same steps.
    records = [rank_record(run_dir, r) for r in range(world)]
    assert [r["rank"] for r in records] == list(range(world))
    assert len({r["param_sha256"] for r in records}) == 1
    assert all(r["optimizer_steps"] == len(steps) and r["world_size"] == world for r in records)
    # Counted once: a step's samples are the global batch, the epoch's the data set.
    assert all(s["samples"] == world * BATCH for s in steps)
    assert sum(s["samples"] for s in steps) == RECORDS
    assert sum(s["tokens_nonpad"] for s in steps) == start["real_tokens_per_epoch"]
    assert steps[-1]["loss"] < steps[0]["loss"]
    # runs: the world size the trainer used, and that it is the plan's.
    run = runs_json()[run_id]
    assert (run["world_size"], run["planned_world_size"], run["world_note"]) == (world, world, "")


def test_two_processes_share_one_epoch_and_a_trainer_that_would_train_copies_fails(
    tmp_path: Path,
) -> None:
    run_id, run_dir = launch(host_preset(tmp_path, 2))
    final = wait_state(run_id, FINAL)
    assert final["state"] == "finished", (run_dir / "train.log").read_text()[-3000:]
    assert_data_parallel(run_id, run_dir, 2)
    log = (run_dir / "train.log").read_text()
    assert "terminate called" not in log and "SIGABRT" not in log  # a clean end on every rank
    # The same run's train step, told it is not on the CPU: refused, not two copies trained.
    assert_copies_refused(run_dir, tmp_path / "again")


def assert_refused_on_every_rank(proc: subprocess.CompletedProcess[str]) -> None:
    """torchrun's root cause is the refusal (exit 4), whichever rank exits first: a rank still
    inside init_process_group once died "Connection closed by peer" and was named instead."""
    output = proc.stdout + proc.stderr
    root_cause = output.split("Root Cause", 1)[-1]
    assert proc.returncode != 0 and re.search(r"exitcode\s*:\s*4\b", root_cause), output[-3000:]
    assert "Connection closed by peer" not in output, output[-3000:]


def assert_copies_refused(run_dir: Path, where: Path) -> None:
    """The finished run's train step again (the same entry, the same two processes), but the
    trainer told it is not on the CPU (--use_cpu False): HF then trains NOT_PARALLEL, world size
    1 - two copies. The entry refuses before training, and the metrics' end line names why."""
    train = json.loads((run_dir / "launch.json").read_text())["train"]
    metrics = where / "metrics.jsonl"
    env = {**os.environ, **train["env"], "TRAINWIZ_METRICS": str(metrics)}
    argv = [*train["argv"], "--use_cpu", "False", "--output_dir", str(where / "out")]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert_refused_on_every_rank(proc)
    end = [json.loads(x) for x in metrics.read_text().splitlines()][-1]
    assert end["kind"] == "end" and end["reason"] == "world_size_mismatch"
    assert "torchrun started 2 processes but the trainer uses world size 1" in end["error"]
    assert not (where / "out" / "model.safetensors").exists()
    assert "terminate called" not in proc.stdout + proc.stderr


def test_two_ssh_nodes_share_one_epoch(
    tmp_path: Path, sshd_port: int, ssh_keys: dict[str, str]
) -> None:
    node = f"127.0.0.1:{sshd_port}"
    path = ssh_preset(tmp_path, ssh_keys, [node, node])
    path.write_text(yaml.safe_dump(one_epoch(yaml.safe_load(path.read_text()))))
    run_id, run_dir = launch(path)
    final = wait_state(run_id, FINAL)
    log = (run_dir / "train.log").read_bytes().decode()
    assert final["state"] == "finished", log[-3000:]
    assert_data_parallel(run_id, run_dir, 2)
    assert "parallel_mode != ParallelMode.DISTRIBUTED" not in log
    assert "terminate called" not in log
    wait_no_leftovers(run_id)


def test_two_slurm_tasks_on_one_host_share_one_epoch(slurm: str, tmp_path: Path) -> None:
    data = one_epoch(yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text()))
    data["name"] = "tiny-slurm-2"
    slurm_block = {"partition": "ci", "time_limit": "20:00", "ntasks_per_node": 2}
    data["launch"].update(scheduler="slurm", nnodes=1, slurm=slurm_block, master_port=free_port())
    path = tmp_path / "tiny-slurm-2.yaml"
    path.write_text(yaml.safe_dump(data))
    run_id, run_dir = launch(path)
    final = wait_state(run_id, FINAL)
    log = (run_dir / "train.log").read_bytes().decode()
    assert final["state"] == "finished", log[-3000:]
    assert final["slurm_state"] == "COMPLETED"
    assert f"[node0 {slurm}] " in log and f"[node1 {slurm}] " in log  # two agents, one host
    assert_data_parallel(run_id, run_dir, 2)
    wait_no_leftovers(run_id)


def test_a_stopped_two_process_run_ends_every_rank_cleanly(tmp_path: Path) -> None:
    path = host_preset(tmp_path, 2)
    data = yaml.safe_load(path.read_text())
    data["training"]["max_steps"] = 5000
    path.write_text(yaml.safe_dump(data))
    run_id, run_dir = launch(path)
    wait_steps(run_dir, 2)
    stopped = json.loads(cli("stop", run_id, "--json").stdout)
    assert stopped["state"] == "stopped" and stopped["left_processes"] == []
    log = (run_dir / "train.log").read_text()
    assert "terminate called" not in log and "core dumped" not in log, log[-3000:]
    # Each rank took the stop as an ending of its own: its record written, its group ended.
    for rank in (0, 1):
        record = rank_record(run_dir, rank)
        assert record["ok"] is False and record["world_size"] == 2
    end = metric_lines(run_dir)[-1]
    assert end["kind"] == "end" and end["ok"] is False and "SIGTERM" in end["error"]
