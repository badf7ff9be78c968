"""FastChat's own training script, unchanged, on 2 CPU processes: the same proofs of data
parallelism as trainwiz's entry (test_data_parallel.py), from what the ranks wrote.

``launch.entry: fastchat-train-mem`` with ``launch.script`` set to the installed FastChat's
``train.py`` (train_mem.py is the same trainer behind flash-attn's CUDA kernels). A launch runs it
under ``<run>/entry/fastchat_entry.py``: the start line carries the trainer's world size, each
rank logs the sample ids it read and its parameter checksum, and a trainer that would train one
copy per process fails with ``world_size_mismatch`` before it trains.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.test_data_parallel import (
    BATCH,
    FINAL,
    RECORDS,
    assert_refused_on_every_rank,
    launch,
    one_epoch,
    rank_record,
    rank_samples,
)
from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    cli,
    home,
    metric_lines,
    runs_json,
    wait_state,
)
from tests.integration.test_multinode_ssh import free_port

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]

ROOT = Path(__file__).resolve().parents[2]


def fastchat_script(name: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec("fastchat.train.train")  # a namespace package: no __file__
    assert spec is not None and spec.origin is not None
    return str(Path(spec.origin).with_name(name))


def fastchat_preset(tmp_path: Path, nproc: int) -> Path:
    data = one_epoch(yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text()))
    data["name"] = f"fastchat-{nproc}p"
    data["training"].pop("attn_implementation")  # trainwiz's entry's option, not FastChat's
    data["launch"].update(
        entry="fastchat-train-mem",
        script=fastchat_script("train.py"),
        nproc_per_node=nproc,
        master_port=free_port(),
    )
    path = tmp_path / f"fastchat-{nproc}p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_fastchat_train_py_on_two_processes_shares_one_epoch_and_refuses_copies(
    tmp_path: Path,
) -> None:
    run_id, run_dir = launch(fastchat_preset(tmp_path, 2))
    final = wait_state(run_id, FINAL)
    log = (run_dir / "train.log").read_text()
    assert final["state"] == "finished", log[-3000:]
    spec = json.loads((run_dir / "launch.json").read_text())["train"]["argv"]
    wrapper = spec.index(str(run_dir / "entry" / "fastchat_entry.py"))
    assert spec[wrapper + 1] == fastchat_script("train.py")  # FastChat's script, as it is
    lines = metric_lines(run_dir)
    start, steps = lines[0], [m for m in lines if m["kind"] == "step"]
    assert start["kind"] == "start" and start["entry"] == "fastchat"
    assert (start["world_size"], start["launched_world_size"]) == (2, 2)  # the trainer's
    assert (start["parallel_mode"], start["dist_backend"]) == ("distributed", "gloo")
    assert lines[-1]["kind"] == "end" and lines[-1]["ok"] is True
    assert len(steps) == RECORDS // (2 * BATCH)  # half a single process's steps
    assert all(s["samples"] == 2 * BATCH for s in steps)  # counted once
    read = [rank_samples(run_dir, r) for r in (0, 1)]
    assert all(len(ids) == RECORDS // 2 for ids in read)
    assert sorted(read[0] + read[1]) == list(range(RECORDS))  # disjoint, the whole data once
    records = [rank_record(run_dir, r) for r in (0, 1)]
    assert records[0]["param_sha256"] == records[1]["param_sha256"]  # one model
    assert all(r["optimizer_steps"] == len(steps) and r["world_size"] == 2 for r in records)
    run = runs_json()[run_id]
    assert (run["world_size"], run["planned_world_size"], run["world_note"]) == (2, 2, "")
    assert "terminate called" not in log
    assert "collective thread(s) still running" not in log, log[-3000:]  # threads joined
    # The same run's train step, told it is not on the CPU: refused, not two copies trained.
    assert_copies_refused(run_dir, tmp_path / "again")


def assert_copies_refused(run_dir: Path, where: Path) -> None:
    """The launch's own train step with --use_cpu False: HF then trains NOT_PARALLEL on this
    machine, world size 1 in each of 2 processes. The wrapper refuses before a model loads."""
    train = json.loads((run_dir / "launch.json").read_text())["train"]
    argv = [*train["argv"], "--use_cpu", "False", "--output_dir", str(where / "out")]
    port = next(i for i, a in enumerate(argv) if a.startswith("--master_port="))
    argv[port] = f"--master_port={free_port()}"
    env = {**os.environ, **train["env"], "TRAINWIZ_METRICS": str(where / "metrics.jsonl")}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert_refused_on_every_rank(proc)
    end = [json.loads(x) for x in (where / "metrics.jsonl").read_text().splitlines()][-1]
    assert end["kind"] == "end" and end["reason"] == "world_size_mismatch"
    assert "torchrun started 2 processes but the trainer uses world size 1" in end["error"]
    assert not (where / "out" / "model.safetensors").exists()
    assert "terminate called" not in proc.stdout + proc.stderr
