"""A real packed training on the CPU through `trainwiz launch`: the entry's packing and kernel
gates run as torchrun starts them (tiny Llama, bundled conversations, host runner)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_packed_launch_trains_on_rows_and_counts_real_tokens(tmp_path: Path) -> None:
    home = Path(os.environ["TRAINWIZ_HOME"])  # the tiny model is in it (tests/conftest.py)
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = "tiny-cpu-packed"
    data["training"].update(
        packing=True, pack_tokens=512, max_steps=4, per_device_train_batch_size=2,
        optim="adamw_torch_fused", use_liger_kernel=True,
    )  # fmt: skip
    path = tmp_path / "packed.yaml"
    path.write_text(yaml.safe_dump(data))
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "launch", str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = proc.stdout
    assert "--packing True --pack_tokens 512" in log  # named in the plan exactly as passed
    assert "use_liger_kernel: Liger's Triton kernels need a GPU: off" in log or (
        "liger_kernel is not installed" in log
    )
    assert "packing: " in log and "rows of 512" in log
    run_dir = max((home / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = next(x for x in lines if x["kind"] == "start")
    steps = [x for x in lines if x["kind"] == "step"]
    assert start["packing"] == 512 and start["attn_implementation"] == "sdpa"  # CPU: no flex bwd
    assert "use_liger_kernel" not in start and start["optim"] == "adamw_torch_fused"
    assert len(steps) == 4
    for step in steps:
        assert step["tokens"] == 2 * 512  # two rows of the budget per micro-batch
        assert 0.5 * step["tokens"] < step["tokens_nonpad"] <= step["tokens"]
        assert step["loss"] is not None
