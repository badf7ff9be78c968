"""`trainwiz tune --probe` on a LoRA preset measures the method candidates (docs/lora.md).

Real parts: the tiny CPU Llama of tiny-cpu-lora, trained a few steps per LoRA candidate through
the entry by the probe's own launches; the QLoRA candidate cannot run on this CPU and must be
reported as skipped with its reason, not crash, and it does not take the place of a LoRA one
(--top 1 launches one LoRA configuration; QLoRA's skipped row comes besides). A CPU preset has
no GPU plan of its own, so the ranking is the planner's for the GPU named with --gpu (the
predicted figures are for it), and its candidates stay padded (packing is for a GPU).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_probe_measures_lora_candidates_and_skips_qlora_on_cpu(
    tiny_model: Path, tmp_path: Path
) -> None:
    shutil.copy(ROOT / "presets" / "tiny-cpu-lora.yaml", tmp_path / "lora.yaml")
    written = tmp_path / "lora-tuned.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "tune", str(tmp_path / "lora.yaml"), "--probe",
         "--gpu", "4090", "--top", "1", "--steps", "4", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    rows = {r["label"]: r for r in out["probe"]}
    assert len(rows) == 2, rows
    lora = [r for label, r in rows.items() if label.startswith("lora")]
    qlora = [r for label, r in rows.items() if label.startswith("qlora")]
    assert lora and qlora, rows
    for row in lora:  # really trained here: every step ran, real tokens/s measured
        assert row["state"] == "finished" and row["steps"] == 4, row
        assert row["measured_real_tokens_per_s"] > 0 and row["source"] == "measured"
        assert row["predicted_real_tokens_per_s"] > 0
        metrics = Path(row["run_dir"]) / "metrics.jsonl"
        start = json.loads(metrics.read_text().splitlines()[0])
        assert start["kind"] == "start" and start["method"] == "lora"
    (skipped,) = qlora
    assert skipped["source"] == "skipped" and skipped["measured_real_tokens_per_s"] is None
    assert "CUDA" in skipped["skipped"] and not skipped["run_id"]
    assert out["winner"] == lora[0]["label"]
    tuned = yaml.safe_load(written.read_text())
    assert tuned["training"]["method"] == "lora"
