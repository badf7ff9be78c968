"""The planner's verdict gates a launch (backend/runs/plangate.py): a preset predicted not to fit
this machine's GPU memory or host RAM is refused before any process starts or file is written,
with the plan's numbers and tune's answer; ``ignore_plan`` (``--ignore-plan``) overrides it.

Before: `trainwiz plan` said DOES NOT FIT, yet `trainwiz launch` started the run, which ran out
of GPU memory in step 1 and left a record saying only "exit code 1".

This machine has no GPU: the NVML snapshot that the Checks step's GPU verdicts and the
planner's ``detect_local`` both read is replaced by a stand-in H100 (the recorded shape of
``backend.nvml.snapshot``), and the host's RAM by a stated figure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

import backend.checks.gpu
import backend.nvml
from backend.errors import BadInput
from backend.plan.resolve import resolve_preset
from backend.planner import gpu as planner_gpu
from backend.planner import hostram
from backend.planner.gpu import gpu_spec
from backend.planner.report import planner_report
from backend.planner.shape import shape_for_preset
from backend.planner.tune import tune
from backend.preset.loader import load_preset
from backend.replay import Replay
from backend.runs.launch import launch, preflight
from backend.runs.plangate import plan_verdict, refuse_over_plan
from tests.trainwiz_cli import ROOT

GIB = 1024**3
H100_BYTES = 85_520_809_984  # NVML's memory_total of an H100 80GB HBM3


def h100_snapshot(count: int = 1) -> dict[str, Any]:
    """An idle H100 node, as ``backend.nvml.snapshot`` reports one."""
    gpu = {"name": "NVIDIA H100 80GB HBM3", "memory_total": H100_BYTES, "memory_used": 0,
           "compute_capability": "9.0", "sm": 90, "mig": False, "processes": []}  # fmt: skip
    return {
        "driver": "550.54.15",
        "cuda": "12.4",
        "gpus": [{**gpu, "index": i} for i in range(count)],
    }


@pytest.fixture()
def h100_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """One H100 and 512 GiB of RAM on this machine, for the checks and the planner alike."""
    snap = h100_snapshot()
    monkeypatch.setattr(backend.nvml, "snapshot", lambda: snap)  # detect_local reads it
    monkeypatch.setattr(backend.checks.gpu, "snapshot", lambda: snap)  # the GPU checks
    monkeypatch.setattr(hostram, "read_meminfo", lambda path="/proc/meminfo": 512 * GIB)


def gpu_preset(tmp_path: Path, *, model: dict[str, Any] | None = None, **training: Any) -> Any:
    """tiny-cpu on CUDA; ``model`` replaces its model (default: Llama-3.1-8B, not downloaded,
    its shape the known repo's), ``training`` updates its training section."""
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = "gate-test"
    data["launch"]["device"] = "cuda"
    data["model"] = model or {
        "source": "hf",
        "repo": "meta-llama/Llama-3.1-8B-Instruct",
        "dir": str(tmp_path / "models" / "llama-8b"),  # not downloaded: the known config's shape
    }
    data["training"].update(bf16=True, model_max_length=4096, per_device_train_batch_size=2)
    data["training"].update(training)
    path = tmp_path / "gate-test.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return load_preset(path)


def no_runs() -> bool:
    runs = Path(os.environ["TRAINWIZ_HOME"]) / "runs"
    return not runs.exists() or not any(runs.iterdir())


def test_a_preset_that_does_not_fit_the_gpu_is_refused_before_a_run_dir_exists(
    tmp_path: Path, h100_here: None
) -> None:
    preset = gpu_preset(tmp_path)  # a full fine-tune of 8B params on one 80 GB GPU
    with pytest.raises(BadInput) as refused:
        launch(preset, ref="my-preset.yaml")
    assert len(refused.value.problems) == 1
    said = refused.value.problems[0]
    assert "gate-test DOES NOT FIT" in said
    # the numbers `trainwiz plan PRESET --gpu h100` prints
    _lines, plan = planner_report(preset, "h100", None)
    assert plan["estimate"]["memory"]["fits"] is False
    need = round(plan["estimate"]["memory"]["total_per_gpu"] / GIB, 1)
    assert f"predicted peak {need} GiB per GPU, the NVIDIA H100 80GB HBM3 here has 79.6 GiB" in said
    # tune's answer, as `trainwiz tune` writes it
    tuned = tune(preset, gpu_spec("h100"), shape_for_preset(preset), host_ram=512 * GIB)
    assert tuned.after.memory.fits and tuned.changes
    fix = ", ".join(f"{c.path}: {c.old!r} -> {c.new!r}" for c in tuned.changes)
    assert f"'trainwiz tune my-preset.yaml' writes a configuration that fits: {fix} (" in said
    assert "training.method: 'full' -> 'lora'" in fix  # no full fine-tune of 8B fits one GPU
    assert said.endswith("pass --ignore-plan")
    assert no_runs()


def test_ignore_plan_passes_the_gate(tmp_path: Path, h100_here: None) -> None:
    preset = gpu_preset(tmp_path)
    preflight(resolve_preset(preset, None), ignore_plan=True)  # nothing else refuses it
    # launched, it meets the next rule (a missing data file) instead of the plan's
    broken = gpu_preset(tmp_path, data_path=str(tmp_path / "missing.json"))
    with pytest.raises(BadInput, match=r"training\.data_path: ") as refused:
        launch(broken, ignore_plan=True)
    assert "DOES NOT FIT" not in str(refused.value)
    with pytest.raises(BadInput, match="DOES NOT FIT"):  # the gate comes first without it
        launch(broken)
    assert no_runs()
    # replay's launch step carries the same choice (`trainwiz replay --ignore-plan`)
    with pytest.raises(BadInput, match=r"training\.data_path: "):
        Replay(broken, ignore_plan=True).step_launch()


def test_a_preset_that_fits_passes(tmp_path: Path, h100_here: None) -> None:
    tiny = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())["model"]
    preset = gpu_preset(tmp_path, model=tiny, model_max_length=256)
    verdict = plan_verdict(preset)
    assert verdict is not None and verdict.fits and verdict.fix == ""
    assert verdict.numbers().startswith("FITS: predicted peak ")
    preflight(resolve_preset(preset, None))  # no BadInput


def test_host_ram_is_judged_too(tmp_path: Path, h100_here: None, monkeypatch: Any) -> None:
    lora = gpu_preset(tmp_path, method="lora", per_device_train_batch_size=1,
                      model_max_length=2048, fsdp="")  # fmt: skip
    verdict = plan_verdict(lora)
    assert verdict is not None and verdict.fits  # 15 GiB of host RAM of 512
    monkeypatch.setattr(hostram, "read_meminfo", lambda path="/proc/meminfo": 8 * GIB)
    verdict = plan_verdict(lora)
    assert verdict is not None and verdict.fits_gpu and not verdict.fits_host
    assert "predicted host RAM peak 15.0 GiB, this machine has 8.0 GiB" in verdict.numbers()
    assert "predicted peak" not in verdict.numbers()  # the GPU is not what fails
    with pytest.raises(BadInput, match="DOES NOT FIT: predicted host RAM peak"):
        refuse_over_plan(lora)


@pytest.mark.parametrize(
    "launch_fields",
    [{"device": "cpu"}, {"nnodes": 2}, {"scheduler": "slurm"}],
    ids=["cpu", "multinode", "slurm"],
)
def test_no_gate_where_the_verdict_is_not_knowable_here(
    tmp_path: Path, h100_here: None, launch_fields: dict[str, Any]
) -> None:
    preset = gpu_preset(tmp_path)
    for key, value in launch_fields.items():
        setattr(preset.launch, key, value)
    assert plan_verdict(preset) is None
    refuse_over_plan(preset)  # no BadInput


def test_no_gate_without_a_gpu_here_or_a_known_shape(
    tmp_path: Path, h100_here: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = gpu_preset(tmp_path, model={"source": "hf", "repo": "someone/unknown-70b",
                                          "dir": str(tmp_path / "nowhere")})  # fmt: skip
    assert plan_verdict(unknown) is None  # no config.json and no known repo: no shape
    monkeypatch.setattr(planner_gpu, "detect_local", lambda: None)  # stand-in: no GPU here
    assert plan_verdict(gpu_preset(tmp_path)) is None
