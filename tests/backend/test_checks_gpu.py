"""GPU judgement on real NVML data recorded on H200 machines (tests/fixtures/h200): this build
machine has no GPU, so the NVML snapshot is rebuilt from the recorded header and samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.checks.context import build_context
from backend.checks.gpu import check_driver, check_gpus
from backend.checks.model import CheckResult
from tests.backend.test_checks_host import make_preset

TRACE = Path(__file__).resolve().parents[1] / "fixtures/h200/nvml-trace-fastchat-1b-2gpu.jsonl"


def recorded(busy: bool = False) -> dict[str, Any]:
    """The NVML snapshot shape, from the trace header and an idle or a training sample."""
    lines = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]
    header, samples = lines[0], lines[1:]
    sample = next(s for s in samples if any(g["procs"] for g in s["gpus"]) == busy)
    cuda = header["cuda_driver_version"]
    gpus = []
    for info, now in zip(header["gpus"], sample["gpus"], strict=True):
        major, minor = info["cc"]
        gpus.append(
            {
                "index": info["index"],
                "name": info["name"],
                "memory_total": info["mem_total"],
                "memory_used": now["used"],
                "compute_capability": f"{major}.{minor}",
                "sm": major * 10 + minor,
                "mig": False,
                "processes": [
                    {"pid": p["pid"], "used": p["used"], "owner": "not visible here"}
                    for p in now["procs"]
                ],
            }
        )
    return {"driver": header["driver"], "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}", "gpus": gpus}


def judge(
    snap: dict[str, Any], tmp_path: Path, **overrides: Any
) -> tuple[CheckResult, CheckResult]:
    ctx = build_context(make_preset(tmp_path, **overrides))
    ctx.memo("nvml", lambda: snap)
    return check_driver(ctx), check_gpus(ctx)


def test_h200_pair_is_ok_for_a_two_gpu_bf16_preset(tmp_path: Path) -> None:
    driver, gpus = judge(
        recorded(),
        tmp_path,
        launch={"runner": "docker", "device": "cuda", "nproc_per_node": 2},
        environment={"image": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-devel"},
        training={"bf16": True, "tf32": True},
    )
    assert driver.status == "ok"
    assert driver.data == {
        "driver": "580.159.04",
        "cuda": "13.0",
        "gpu_count": 2,
        "image_cuda": "12.4",
    }
    assert gpus.status == "ok"
    assert gpus.summary.startswith("2 × NVIDIA H200, sm90")
    assert "FlashAttention-2 available" in gpus.summary


def test_more_processes_than_gpus_fails(tmp_path: Path) -> None:
    _, gpus = judge(recorded(), tmp_path, launch={"device": "cuda", "nproc_per_node": 8})
    assert gpus.status == "fail" and "nproc_per_node is 8 but 2 GPU(s)" in gpus.summary
    assert "launch.nproc_per_node: 2" in gpus.fix and gpus.blocks == ["launch"]


def test_gpus_in_use_by_other_processes_warn(tmp_path: Path) -> None:
    _, gpus = judge(recorded(busy=True), tmp_path, launch={"device": "cuda", "nproc_per_node": 2})
    assert gpus.status == "warn" and "already in use" in gpus.summary
    assert "pid" in gpus.detail


def test_image_newer_than_the_driver(tmp_path: Path) -> None:
    snap = recorded()
    snap["cuda"] = "12.2"  # as a 535 driver reports
    docker = {"runner": "docker", "device": "cuda"}
    driver, _ = judge(
        snap, tmp_path, launch=docker, environment={"image": "nvidia/cuda:13.0.0-base"}
    )
    assert driver.status == "fail" and "image needs CUDA 13.0" in driver.summary
    driver, _ = judge(snap, tmp_path, launch=docker, environment={"image": "x/y:2.5-cuda12.4"})
    assert driver.status == "warn" and "minor-version compatibility" in driver.summary


def test_pre_ampere_cannot_do_bf16_tf32_or_flash_attention(tmp_path: Path) -> None:
    snap = recorded()
    for gpu in snap["gpus"]:  # the same pair seen as V100s (sm70)
        gpu.update(name="Tesla V100-SXM2-32GB", compute_capability="7.0", sm=70)
    _, gpus = judge(
        snap,
        tmp_path,
        launch={"device": "cuda", "nproc_per_node": 2},
        environment={"flash_attn": {"install": "always"}},
        training={"bf16": True, "tf32": True},
    )
    assert gpus.status == "fail"
    for needle in ("bf16 needs sm80+", "tf32 needs sm80+", "FlashAttention-2 needs sm80+"):
        assert needle in gpus.summary
    assert "training.fp16: true" in gpus.fix and "install: never" in gpus.fix


def test_mig_warns(tmp_path: Path) -> None:
    snap = recorded()
    snap["gpus"][0]["mig"] = True
    _, gpus = judge(snap, tmp_path, launch={"device": "cuda", "nproc_per_node": 2})
    assert gpus.status == "warn" and "MIG" in gpus.summary and "nvidia-smi -mig 0" in gpus.fix
