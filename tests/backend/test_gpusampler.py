"""The per-node GPU sampler module (backend/entry/gpusampler.py), run as every node runs it.

This machine has no NVIDIA driver, so the real readings here are the no-GPU record; the
``nvidia-smi`` path is exercised with a FAKE ``nvidia-smi`` (a shell script answering the two
queries the sampler makes with the values of the recorded H200 screen in
tests/fixtures/h200/nvidia-smi-2gpu.txt), named so because the real tool cannot run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.entry import gpusampler
from backend.monitor.nodegpu import NodeGpuFile

SAMPLER = Path(gpusampler.__file__)
TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "h200" / "nvml-trace-fastchat-1b.jsonl"


def records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def run_sampler(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SAMPLER), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env or {**os.environ, "PATH": "/usr/bin:/bin"},
    )


def test_no_gpu_here_is_a_record_with_the_reasons(tmp_path: Path) -> None:
    proc = run_sampler(
        "--node=node3", "--host=cpu", f"--out-dir={tmp_path}", "--max-samples=2", "--interval=0.05"
    )
    assert proc.returncode == 0, proc.stderr
    header, *samples, end = records(tmp_path / "node3" / "gpu.jsonl")
    assert (header["kind"], header["state"], header["source"], header["gpus"]) == (
        "header",
        "no_gpu",
        "none",
        [],
    )
    assert (
        "nvml:" in header["message"]
        and "nvidia-smi: nvidia-smi is not on PATH" in header["message"]
    )
    assert [s["gpus"] for s in samples] == [[], []]  # heartbeats: alive, nothing to read
    assert end == {**end, "kind": "end", "reason": "2 samples taken"}


FAKE_SMI = """#!/bin/sh
# FAKE nvidia-smi for tests: the recorded H200 screen's values, in the CSV the sampler asks for.
case "$1" in
  --query-gpu=*)
    echo "0, NVIDIA H200, 0, 143771, 0, 33, 79.39, 700.00, 00000000:00:06.0, 580.159.04"
    echo "1, NVIDIA H200, 1024, 143771, 97, 34, [N/A], 700.00, 00000000:00:07.0, 580.159.04";;
  --query-compute-apps=*)
    echo "00000000:00:07.0, $RUN_PID, 1000"
    echo "00000000:00:07.0, $OTHER_PID, 24";;
esac
"""


def test_nvidia_smi_fallback_and_which_processes_are_this_run(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    marker = f"TRAINWIZ_METRICS={tmp_path}/metrics.jsonl"
    ours = subprocess.Popen(["sleep", "60"], env={**os.environ, "TRAINWIZ_METRICS": marker[17:]})
    other = subprocess.Popen(["sleep", "60"])
    try:
        env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
        env |= {"RUN_PID": str(ours.pid), "OTHER_PID": str(other.pid)}
        env["PYTHONPATH"] = str(tmp_path / "no-pynvml")  # a venv without nvidia-ml-py
        (tmp_path / "no-pynvml").mkdir()
        (tmp_path / "no-pynvml" / "pynvml.py").write_text("raise ImportError('not installed')\n")
        proc = run_sampler(
            "--node=node0",
            f"--out-dir={tmp_path}",
            "--max-samples=1",
            f"--marker={marker}",
            env=env,
        )
    finally:
        ours.kill()
        other.kill()
    assert proc.returncode == 0, proc.stderr
    header, sample, _end = records(tmp_path / "node0" / "gpu.jsonl")
    assert header["source"] == "nvidia-smi" and header["driver"] == "580.159.04"
    assert header["message"] == "nvml: the nvidia-ml-py package (pynvml) is missing"
    assert header["gpus"][0] == {
        "index": 0,
        "name": "NVIDIA H200",
        "mem_total": 143771 * 2**20,
        "power_limit_mw": 700000,
    }
    gpu0, gpu1 = sample["gpus"]
    assert (gpu0["used"], gpu0["temp"], gpu0["power_mw"], gpu0["procs"]) == (0, 33, 79390, [])
    assert (gpu1["used"], gpu1["util"], gpu1["power_mw"]) == (1024 * 2**20, 97, None)
    assert gpu1["procs"] == [
        {"pid": ours.pid, "used": 1000 * 2**20, "owner": "this run"},
        {"pid": other.pid, "used": 24 * 2**20, "owner": "other"},
    ]


def test_replay_source_rewrites_time_and_loops(tmp_path: Path) -> None:
    started = time.time()
    rows = len(TRACE.read_text().splitlines()) - 1
    proc = run_sampler(
        "--node=node1",
        f"--out-dir={tmp_path}",
        f"--replay={TRACE}",
        f"--replay-start={rows - 1}",
        "--max-samples=2",
        "--interval=0.01",
    )
    assert proc.returncode == 0, proc.stderr
    header, last_row, first_row, _end = records(tmp_path / "node1" / "gpu.jsonl")
    recorded = [json.loads(x) for x in TRACE.read_text().splitlines()]
    assert header["source"] == "replay:nvml-trace-fastchat-1b.jsonl"
    assert header["gpus"] == recorded[0]["gpus"] and header["driver"] == recorded[0]["driver"]
    assert last_row["gpus"] == recorded[-1]["gpus"] and first_row["gpus"] == recorded[1]["gpus"]
    assert started <= last_row["t"] <= first_row["t"] <= time.time()


def test_a_long_file_is_rotated_and_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpusampler, "ROTATE_BYTES", 1000)
    out = tmp_path / "node0" / "gpu.jsonl"
    follower = NodeGpuFile(out)
    sampler = gpusampler.Sampler(out, "node0", "gpu-a", interval=0.001)
    sampler.run(gpusampler.ReplayReader(TRACE), [], max_samples=12)
    follower.poll()
    assert (out.parent / "gpu.jsonl.1").exists()  # the earlier lines, kept once
    first = records(out)[0]
    assert first["kind"] == "header" and first["node"] == "node0"
    assert follower.header is not None and follower.end is not None
    assert follower.end["reason"] == "12 samples taken"


def test_describe_says_how_a_sampler_is() -> None:
    header = {"kind": "header", "started": 100.0, "interval": 1.0, "state": "ok"}
    assert gpusampler.describe(None, None, None, 100)[0] == "waiting"
    assert gpusampler.describe(header, {"t": 101.0}, None, 102)[0] == "ok"
    assert gpusampler.describe(header, {"t": 101.0}, None, 120) == (
        "gone",
        "no sample for 19 s: the sampler on this node stopped",
    )
    assert gpusampler.describe(
        header, {"t": 101.0, "state": "error", "message": "NVML x"}, None, 102
    ) == ("error", "NVML x")
    assert (
        gpusampler.describe({**header, "state": "no_gpu", "message": "m"}, {"t": 101}, None, 102)[0]
        == "no_gpu"
    )
    assert gpusampler.describe(header, {"t": 101.0}, {"kind": "end", "reason": "r"}, 500) == (
        "stopped",
        "sampler stopped: r",
    )
