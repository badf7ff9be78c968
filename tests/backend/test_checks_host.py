"""Host checks against the real machine: disk, RAM, /dev/shm, memlock, a real port, git, NVML."""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from backend.checks import CheckResult, run_checks
from backend.checks.host import read_meminfo
from backend.checks.sizing import planned_sizes
from backend.preset.schema import Preset

MiB = 1024**2


def make_preset(tmp_path: Path, **overrides: Any) -> Preset:
    """A small valid preset whose paths live under tmp_path; sections merged from overrides."""
    data: dict[str, Any] = {
        "schema": 1,
        "name": "check-test",
        "model": {"source": "local", "dir": str(tmp_path / "model")},
        "launch": {"runner": "host", "device": "cpu", "master_port": 29999},
        "training": {"data_path": "x.json", "output_dir": str(tmp_path / "out")},
    }
    for section, values in overrides.items():
        data[section] = {**data.get(section, {}), **values}
    return Preset.model_validate(data)


def one(preset: Preset | None, check_id: str) -> CheckResult:
    (result,) = run_checks(preset, only=[check_id])
    assert result.id == check_id
    return result


def _nvml_loadable() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def test_nvidia_driver_follows_the_real_nvml(tmp_path: Path) -> None:
    gpu_preset = make_preset(tmp_path, launch={"device": "cuda"})
    driver = one(gpu_preset, "nvidia_driver")
    gpus = one(gpu_preset, "gpus")
    if _nvml_loadable():  # a GPU machine: the real driver answers
        assert driver.status in ("ok", "warn") and driver.data["driver"]
        assert gpus.data["gpus"]
        return
    # This machine has no NVIDIA driver: the real pynvml raises LibraryNotFound.
    assert driver.status == "fail"
    assert "NVMLError_LibraryNotFound" in driver.detail
    assert "cuda-drivers" in driver.fix and "cuda-keyring" in driver.fix
    assert driver.blocks == ["launch"]
    assert gpus.status == "fail" and gpus.blocks == ["launch"]
    # A CPU preset does not need it; with no preset it is a warning, not a failure.
    assert one(make_preset(tmp_path), "nvidia_driver").status == "skip"
    assert one(None, "nvidia_driver").status == "warn"


def test_disk_reports_the_real_free_space_and_counts_weights(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * (3 * MiB))
    (model / "pytorch_model.bin").write_bytes(b"\0" * (5 * MiB))  # safetensors wins
    (model / "config.json").write_text('{"torch_dtype": "float16"}')
    preset = make_preset(tmp_path, training={"save_total_limit": 2})
    result = one(preset, "disk")
    assert result.status == "ok"
    locations = {loc["purpose"]: loc for loc in result.data["locations"]}
    real_free = shutil.disk_usage(tmp_path).free
    assert abs(locations["model"]["free"] - real_free) < 256 * MiB
    assert locations["model"]["need"] == 0  # weights already there
    params = 3 * MiB // 2  # fp16 bytes -> params
    # 2 kept + 1 being written (the oldest is deleted only after the new one is complete)
    assert locations["output"]["need"] == 3 * 12 * params
    assert "kept + 1 being written" in locations["output"]["how"]
    assert str(tmp_path / "out") == locations["output"]["path"]


def test_disk_fails_and_blocks_only_the_model_step_when_the_download_cannot_fit(
    tmp_path: Path,
) -> None:
    free = shutil.disk_usage(tmp_path).free
    huge = free // int(1e9) + 10  # billions of params: 2 bytes each cannot fit
    preset = make_preset(
        tmp_path,
        model={"source": "hf", "repo": f"someone/llama-{huge}b"},
        training={"save_strategy": "no"},
    )
    result = one(preset, "disk")
    assert result.status == "fail"
    assert "model" in result.blocks
    assert "save_total_limit" in result.fix


def test_ram_matches_proc_meminfo_and_the_planners_host_peak(tmp_path: Path) -> None:
    result = one(None, "ram")
    mem = read_meminfo("/proc/meminfo")
    with open("/proc/meminfo", encoding="ascii") as handle:
        total_kb = next(int(line.split()[1]) for line in handle if line.startswith("MemTotal:"))
    assert result.data["total"] == total_kb * 1024 == mem["MemTotal"]
    assert abs(result.data["available"] - mem["MemAvailable"]) < 512 * MiB
    big = make_preset(
        tmp_path,
        model={"source": "hf", "repo": "lmsys/vicuna-13b-v1.3"},
        launch={"runner": "host", "device": "cuda", "nproc_per_node": 8},
        training={"fsdp": "full_shard auto_wrap offload"},
    )
    result = one(big, "ram")
    planned = planned_sizes(big)  # one estimator: the check says the planner's number
    assert planned is not None and result.data["need"] == planned.host_ram_bytes
    assert result.data["need"] > 4 * 13 * 10**9 * 8  # at least FastChat's fp32 load per rank
    expected = "fail" if mem["MemTotal"] < result.data["need"] else "ok"
    assert result.status in (expected, "warn")
    if result.status == "fail":
        assert result.blocks == ["launch"] and "nproc_per_node" in result.fix


def test_shm_matches_statvfs_and_docker_default_breaks_multi_gpu(tmp_path: Path) -> None:
    st = os.statvfs("/dev/shm")
    result = one(None, "shm")
    assert result.data["size"] == st.f_blocks * st.f_frsize
    assert abs(result.data["free"] - st.f_bavail * st.f_frsize) < 256 * MiB
    bridged = make_preset(
        tmp_path,
        launch={"runner": "docker", "device": "cpu", "nproc_per_node": 4},
        container={"ipc": None, "shm_size": None},
    )
    result = one(bridged, "shm")
    assert result.status == "fail" and result.blocks == ["launch"]
    assert "ipc: host" in result.fix and result.data["container_shm"] == 64 * MiB
    host_ipc = make_preset(
        tmp_path,
        launch={"runner": "docker", "device": "cpu", "nproc_per_node": 4},
        container={"ipc": "host"},
    )
    assert one(host_ipc, "shm").data["size"] == st.f_blocks * st.f_frsize


def test_memlock_is_the_real_rlimit_and_flags_a_seed_ulimit_above_it(tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    result = one(None, "memlock")
    assert (result.data["soft"], result.data["hard"]) == (soft, hard)
    seed_like = make_preset(
        tmp_path,
        launch={"runner": "docker", "device": "cpu"},
        container={"ulimits": [{"name": "memlock", "value": "-1"}]},
    )
    result = one(seed_like, "memlock")
    if hard == resource.RLIM_INFINITY:
        assert result.status == "ok"
    else:
        assert result.status == "warn" and "LimitMEMLOCK=infinity" in result.fix


def test_master_port_taken_by_a_real_socket_then_freed(tmp_path: Path) -> None:
    """Nodes started by hand must agree on the port, so a taken one fails and blocks the launch."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("0.0.0.0", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    preset = make_preset(
        tmp_path,
        launch={"master_port": port, "nnodes": 2, "node_rank": 0},
    )
    try:
        taken = one(preset, "master_port")
    finally:
        holder.close()
    assert taken.status == "fail" and taken.blocks == ["launch"]
    assert f"{port} is taken" in taken.summary and str(os.getpid()) in taken.summary
    assert str(port) in taken.fix
    assert one(preset, "master_port").status == "ok"
    worker = make_preset(tmp_path, launch={"master_port": port, "nnodes": 2, "node_rank": 1})
    assert one(worker, "master_port").status == "skip"


def test_a_taken_port_on_one_node_names_the_port_the_launch_uses(tmp_path: Path) -> None:
    """One node on the host network: the launch takes the next free port itself, so the check
    says which (the launch spec's own choice) and blocks nothing."""
    from backend.runs.spec import build_spec

    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("0.0.0.0", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    preset = make_preset(tmp_path, launch={"master_port": port})
    try:
        taken = one(preset, "master_port")
        spec = build_spec(preset)
    finally:
        holder.close()
    assert taken.status == "ok" and not taken.blocks
    assert spec.master_port != port
    assert taken.summary.endswith(f"the launch uses {spec.master_port}")
    assert f"{port} is taken" in taken.summary and str(os.getpid()) in taken.summary


def test_git_and_git_lfs_report_the_installed_versions(tmp_path: Path) -> None:
    git = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True)
    assert one(None, "git").summary == git.stdout.strip()
    lfs = subprocess.run(["git", "lfs", "version"], capture_output=True, text=True, check=False)
    result = one(make_preset(tmp_path, model={"source": "git_lfs", "repo": "a/b-7b"}), "git_lfs")
    if lfs.returncode == 0:
        assert lfs.stdout.strip() in result.summary
    else:
        assert result.status == "fail" and "apt-get install -y git-lfs" in result.fix


def test_git_lfs_without_hooks_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh HOME has no `git lfs install` filter: a clone would hold pointer files."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    preset = make_preset(tmp_path, model={"source": "git_lfs", "repo": "a/b-7b"})
    result = one(preset, "git_lfs")
    assert result.status == "fail" and result.fix == "git lfs install"
    subprocess.run(["git", "lfs", "install"], check=True, capture_output=True)
    assert one(preset, "git_lfs").status == "ok"


def test_lora_disk_and_ram_are_the_planners_adapter_numbers(tmp_path: Path) -> None:
    """A LoRA checkpoint is its adapters + their Adam state, not 12 bytes × 7 B; the RAM is the
    bf16 base the planner loads, not an fp32 copy per rank."""
    from backend.planner import gpu_spec, plan_preset

    lora = make_preset(
        tmp_path,
        model={"source": "hf", "repo": "lmsys/vicuna-7b-v1.5"},
        launch={"runner": "host", "device": "cuda", "nproc_per_node": 1},
        training={"method": "lora", "bf16": True, "save_strategy": "steps",
                  "save_total_limit": 10},
    )  # fmt: skip
    planned = planned_sizes(lora)
    assert planned is not None
    plan = plan_preset(lora, gpu_spec("4090"))
    assert planned.host_ram_bytes == plan.estimate.memory.host_ram_peak
    disk = one(lora, "disk")
    output = next(x for x in disk.data["locations"] if x["purpose"] == "output")
    assert output["need"] == 11 * 12 * planned.trained_params
    assert output["need"] < 2 * 2**30  # ~1 GiB of adapters, not 893 GiB of full checkpoints
    ram = one(lora, "ram")
    assert ram.data["need"] == planned.host_ram_bytes < 14 * 2**30
