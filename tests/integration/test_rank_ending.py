"""Every rank of a 2-process run ends cleanly: the real entry on success (twice: the launch and its
train step again with FSDP flags) and on a failure. (The stop is test_data_parallel.py's
``test_a_stopped_two_process_run_ends_every_rank_cleanly``; a real 2-rank FSDP job ending the
entry's way is the sharded checkpoint's writer in test_results_sharded.py, checked with
:func:`assert_clean`.)

Why more than once: a rank that leaves its process group's threads to the interpreter's teardown
aborts only now and then ("terminate called without an active exception", SIGABRT, after it
trained); one run proves little. The mechanism itself is shown deterministically below (the
threads DDP keeps past the group's destroy are named on every rank, and the rank still ends
cleanly), so the runs here are a second guard beside the suite's other 2-process runs, which
check the same (each is a 2-process training: ~8 CPU-seconds of the suite's two cores). The
entry runs are the run's own train step (launch.json's argv and env, as the watcher starts it)
with a 2-GPU FSDP preset's flags, which the entry leaves out on the CPU (accelerate builds an
FSDP plugin only on an accelerator device: plain DDP, as the plan says). torchrun's exit code
is 0 only when every rank's is; a rank says on stderr when a collective thread outlived the
group's end, so its absence shows each rank joined its gloo threads before leaving.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.integration.test_launch_host import (  # noqa: F401 (fixtures)
    cli,
    home,
    wait_state,
)
from tests.integration.test_multinode_ssh import free_port

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]

ROOT = Path(__file__).resolve().parents[2]
# A 2-GPU FSDP preset's flags; on the CPU the entry leaves them out (plain DDP, as the plan says).
FSDP = [
    "--fsdp",
    "full_shard auto_wrap",
    "--fsdp_transformer_layer_cls_to_wrap",
    "LlamaDecoderLayer",
]
LEFT_THREADS = "collective thread(s) still running"


def train_step(tmp_path: Path) -> dict:
    """The train step of a finished 2-process run (the argv and env the watcher ran)."""
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = "tiny-ending"
    data["training"]["max_steps"] = 3
    data["launch"].update(nproc_per_node=2, master_port=free_port())
    path = tmp_path / "tiny-ending.yaml"
    path.write_text(yaml.safe_dump(data))
    started = json.loads(cli("launch", str(path), "--detach", "--json").stdout)
    final = wait_state(started["run_id"], ("finished", "failed", "stopped"))
    run_dir = Path(started["run_dir"])
    log = (run_dir / "train.log").read_text()
    assert final["state"] == "finished", log[-3000:]
    assert_clean_text(log)
    return json.loads((run_dir / "launch.json").read_text())["train"]


def rerun(train: dict, where: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = list(train["argv"])
    port = next(i for i, a in enumerate(argv) if a.startswith("--master_port="))
    argv[port] = f"--master_port={free_port()}"
    argv += ["--output_dir", str(where / "out"), *extra]
    env = {**os.environ, **train["env"], "TRAINWIZ_METRICS": str(where / "metrics.jsonl")}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)


def end_line(where: Path) -> dict:
    return [json.loads(x) for x in (where / "metrics.jsonl").read_text().splitlines()][-1]


@pytest.fixture(scope="module")
def finished_train_step(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict:
    """One finished 2-process launch, whose train step both entry tests below run again (each
    launch is a 2-process training): in a home of the module's own, the tiny model in it."""
    import shutil

    own_home = tmp_path_factory.mktemp("ending-home")
    shutil.copytree(tiny_model, own_home / "models" / "tiny-llama")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRAINWIZ_HOME", str(own_home))
        return train_step(tmp_path_factory.mktemp("ending"))


ONE_LAUNCH = pytest.mark.xdist_group("rank-ending-launch")  # the module fixture made once


@ONE_LAUNCH
def test_every_rank_of_a_2_process_fsdp_entry_run_ends_cleanly(
    tmp_path: Path, finished_train_step: dict
) -> None:
    train = finished_train_step  # the launch itself ended cleanly (train_step checks its log)
    where = tmp_path / "again"
    proc = rerun(train, where, *FSDP)
    assert "no FSDP on the CPU (plain DDP, every process holds the whole model)" in proc.stdout
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert_clean(proc)
    assert end_line(where)["ok"] is True
    assert (where / "out" / "model.safetensors").is_file()


@ONE_LAUNCH
def test_a_failing_2_process_run_ends_every_rank_cleanly(
    tmp_path: Path, finished_train_step: dict
) -> None:
    # Both ranks fail in training (weights gone NaN: the loss guard ends the run, exit code 3).
    train = finished_train_step
    model = poisoned_model(Path(os.environ["TRAINWIZ_HOME"]) / "models" / "tiny-llama", tmp_path)
    where = tmp_path / "failing"
    proc = rerun(train, where, "--model_name_or_path", str(model))
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "[trainwiz-entry] non-finite loss at step" in output, output[-3000:]
    assert_clean(proc)  # no abort, gloo's threads joined on each rank
    assert "exitcode: 3" in output  # the guard's code, not an abort's
    end = end_line(where)
    assert end["ok"] is False and end["reason"] == "loss_nan"


def assert_clean(proc: subprocess.CompletedProcess[str]) -> None:
    """torchrun's output: no rank aborted, each joined its gloo threads before leaving."""
    assert_clean_text(proc.stdout + proc.stderr)


def assert_clean_text(output: str) -> None:
    assert "terminate called" not in output and "SIGABRT" not in output, output[-3000:]
    assert "Signal 6" not in output and "exitcode: -6" not in output, output[-3000:]
    assert LEFT_THREADS not in output, output[-3000:]  # gloo's threads joined on each rank


def poisoned_model(model_dir: Path, tmp_path: Path) -> Path:
    """A copy of the tiny model with its final norm NaN: every logit, so the loss, is NaN."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    target = tmp_path / "nan-model"
    shutil.copytree(model_dir, target)
    for shard in target.glob("*.safetensors"):
        tensors = load_file(shard)
        if "model.norm.weight" in tensors:
            tensors["model.norm.weight"] = torch.full_like(
                tensors["model.norm.weight"], float("nan")
            )
            save_file(tensors, shard, metadata={"format": "pt"})
            return target
    raise AssertionError(f"no model.norm.weight in {model_dir}")


RANKS_JOB = Path(__file__).with_name("ending_ranks.py")


def ranks_job(mode: str) -> subprocess.CompletedProcess[str]:
    import sys

    torchrun = Path(sys.executable).with_name("torchrun")
    argv = [str(torchrun), "--nproc_per_node=2", f"--master_port={free_port()}", str(RANKS_JOB)]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*argv, "--mode", mode], capture_output=True, text=True, timeout=300, env=env
    )


def test_a_rank_ends_with_its_group_gone_and_its_threads_joined() -> None:
    proc = ranks_job("ok")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert_clean(proc)


def test_a_group_ddp_keeps_past_its_destroy_is_named_and_the_rank_still_ends_cleanly() -> None:
    # The cause: after destroy_process_group (and a collection) DDP's reducer still holds the
    # group, so its gloo threads run on into the interpreter's teardown, where a rank aborted
    # now and then. finish says so and leaves without that teardown: exit 0, no abort.
    proc = ranks_job("ddp")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "terminate called" not in output and "exitcode: -6" not in output
    for rank in (0, 1):
        line = next(x for x in proc.stdout.splitlines() if x.startswith(f"THREADS rank {rank}"))
        assert "pt_gloo_runloop" in line and "gloo_tcp_loop" in line, line
        assert f"rank {rank}: 3 {LEFT_THREADS} after the process group ended" in output, output


@pytest.mark.parametrize(
    ("mode", "code"), [("fail", "exitcode: 1"), ("exit3", "exitcode: 3"), ("stop", "exitcode: -15")]
)
def test_failure_and_stop_end_every_rank_with_its_own_code(mode: str, code: str) -> None:
    proc = ranks_job(mode)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert code in output, output[-3000:]
    assert_clean(proc)
    if mode == "fail":  # the traceback once per rank, not twice
        assert output.count("ValueError: a failure after training") == 2, output[-3000:]
