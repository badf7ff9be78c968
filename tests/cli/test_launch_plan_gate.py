"""`trainwiz launch` refuses a preset the plan predicts not to fit this machine, in one line
with the plan's numbers and tune's fix, before anything is written; `--ignore-plan` (launch and
replay) overrides it.

Before: `trainwiz plan PRESET --gpu h100` said DOES NOT FIT, yet `trainwiz launch` started the
run; it ran out of GPU memory in step 1 and its record said only "exit code 1".

This machine has no GPU, so the child process gets a stand-in NVML through its environment: a
FAKE ``pynvml`` module first on PYTHONPATH describing one idle H100 80GB (the binding the GPU
checks and the planner's ``detect_local`` both read), named so because the real driver cannot
run here. Each launch that passes the gate is stopped right after it by a missing data file
(the next rule of the launch's preflight), so no run starts.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.trainwiz_cli import ROOT, cli

FAKE_PYNVML = '''"""FAKE pynvml for tests: one idle NVIDIA H100 80GB HBM3."""


class NVMLError(Exception):
    pass


class _Memory:
    total, used = 85_520_809_984, 0


def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlSystemGetCudaDriverVersion_v2(): return 12040
def nvmlSystemGetDriverVersion(): return "550.54.15"
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(index): return index
def nvmlDeviceGetMemoryInfo(handle): return _Memory()
def nvmlDeviceGetCudaComputeCapability(handle): return (9, 0)
def nvmlDeviceGetMigMode(handle): return (0, 0)
def nvmlDeviceGetComputeRunningProcesses(handle): return []
def nvmlDeviceGetName(handle): return "NVIDIA H100 80GB HBM3"
'''


@pytest.fixture()
def h100_env(tmp_path: Path) -> dict[str, str]:
    fake = tmp_path / "fake-nvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text(FAKE_PYNVML, encoding="utf-8")
    return {**os.environ, "PYTHONPATH": str(fake), "TRAINWIZ_HOME": str(tmp_path / "home")}


def write_preset(tmp_path: Path, name: str, model: dict[str, Any] | None = None) -> Path:
    """tiny-cpu on CUDA with a data file that does not exist (the rule after the gate);
    ``model`` default: Llama-3.1-8B, not downloaded (the known repo's shape), full fine-tune."""
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = name
    data["launch"]["device"] = "cuda"
    data["model"] = model or {"source": "hf", "repo": "meta-llama/Llama-3.1-8B-Instruct",
                              "dir": str(tmp_path / "models" / "llama-8b")}  # fmt: skip
    data["training"].update(bf16=True, data_path=str(tmp_path / "missing.json"))
    if model is None:
        data["training"].update(model_max_length=4096, per_device_train_batch_size=2)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.strip()]


def no_runs(env: dict[str, str]) -> bool:
    runs = Path(env["TRAINWIZ_HOME"]) / "runs"
    return not runs.exists() or not any(runs.iterdir())


def test_launch_refuses_what_the_plan_says_does_not_fit(
    tmp_path: Path, h100_env: dict[str, str]
) -> None:
    preset = write_preset(tmp_path, "llama8b-full-1gpu")
    plan = cli("plan", str(preset), env=h100_env)  # the stand-in H100 is this machine's GPU
    assert "of  79.65 GiB: DOES NOT FIT" in plan.stdout, plan.stdout[-2000:]

    done = cli("launch", str(preset), "--detach", check=False, env=h100_env)
    said = lines(done)
    assert done.returncode == 2 and len(said) == 1, done.stderr
    assert said[0].startswith("trainwiz: plan: llama8b-full-1gpu DOES NOT FIT: predicted peak ")
    assert "GiB per GPU, the NVIDIA H100 80GB HBM3 here has 79.6 GiB" in said[0]
    assert f"'trainwiz tune {preset}' writes a configuration that fits: " in said[0]
    assert said[0].endswith("pass --ignore-plan")
    assert no_runs(h100_env)

    forced = cli("launch", str(preset), "--detach", "--ignore-plan", check=False, env=h100_env)
    said = lines(forced)  # past the gate: the next rule of the preflight speaks
    assert forced.returncode == 2 and len(said) == 1, forced.stderr
    assert said[0].startswith("trainwiz: training.data_path: "), said
    assert no_runs(h100_env)

    replayed = ("replay", str(preset), "--from", "launch", "--detach")
    assert "DOES NOT FIT" in cli(*replayed, check=False, env=h100_env).stderr
    forced = cli(*replayed, "--ignore-plan", check=False, env=h100_env)
    assert forced.returncode == 2 and "training.data_path: " in forced.stderr, forced.stderr
    assert "DOES NOT FIT" not in forced.stderr
    assert no_runs(h100_env)


def test_a_preset_that_fits_passes_the_gate(tmp_path: Path, h100_env: dict[str, str]) -> None:
    tiny = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())["model"]
    preset = write_preset(tmp_path, "tiny-gpu", model=tiny)
    done = cli("launch", str(preset), "--detach", check=False, env=h100_env)
    said = lines(done)
    assert done.returncode == 2 and len(said) == 1, done.stderr
    assert said[0].startswith("trainwiz: training.data_path: "), said  # not the plan's refusal
    assert no_runs(h100_env)
