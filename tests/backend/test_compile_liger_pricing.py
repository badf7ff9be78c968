"""Regional compile and Liger priced as the H100 measured them (docs/performance.md "LoRA 6.74B:
Liger under regional compile", 2026-12-06): under compile the entry applies Liger's fused linear
cross-entropy alone, so compile carries the fused layer work (x1.25 over eager, fitted) and
Liger's loss adds x1.01; eager keeps every Liger kernel (x1.20). The rows: 6.74B Vicuna-7B
shape, LoRA r 8 on q/k/v/o, dropout 0.05, packed 8192 x 1, accumulation 2, fused AdamW, the
held-out lengths of docs/gpu/lora-sweep/lengths-sharegpt.json (in-sample for the constants)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.planner.gpu import gpu_spec
from backend.planner.methods import MethodSettings, estimate_method
from backend.planner.realdata import dist_from_report
from backend.planner.settings import TrainSettings
from backend.planner.shape import KNOWN_CONFIGS, shape_from_config
from backend.planner.throughput import COMPILE_LAYERS_SPEEDUP, LIGER_LOSS_SPEEDUP, LIGER_SPEEDUP

ROOT = Path(__file__).resolve().parents[2]
LENGTHS = ROOT / "docs" / "gpu" / "lora-sweep" / "lengths-sharegpt.json"
ROWS = ROOT / "docs" / "gpu" / "lora-sweep" / "liger-compile" / "lora-sweep-sharegpt.jsonl"
SHAPE_7B = shape_from_config(KNOWN_CONFIGS["lmsys/vicuna-7b-v1.5"])
H100 = gpu_spec("h100")
LORA = MethodSettings("lora", 8, ("q_proj", "k_proj", "v_proj", "o_proj"), 0.05)
ROW = TrainSettings(micro_batch=1, grad_accum=2, packing=True, pack_tokens=8192,
                    optim="adamw_torch_fused", attn="flex_attention", compile_layers=True)  # fmt: skip


def measured(row: str) -> float:
    for line in ROWS.read_text().splitlines():
        got = json.loads(line)
        if got["row"] == row:
            return float(got["measured_real_tokens_per_s"])
    raise AssertionError(f"no row {row}")


def rate(s: TrainSettings) -> float:
    return estimate_method(
        SHAPE_7B, s, LORA, H100, dist_from_report(LENGTHS)
    ).throughput.real_tokens_per_s


def test_compiled_rows_predicted_within_five_percent() -> None:
    # p8192-flce is what the entry now runs for compile + use_liger_kernel
    assert rate(ROW.with_(liger=True)) == pytest.approx(measured("p8192-flce"), rel=0.05)
    assert rate(ROW) == pytest.approx(measured("p8192-nolig"), rel=0.05)


def test_compile_is_ranked_above_eager_liger_and_liger_adds_only_its_loss_under_it() -> None:
    compiled, compiled_liger = rate(ROW), rate(ROW.with_(liger=True))
    eager_liger = rate(ROW.with_(liger=True, compile_layers=False))
    assert compiled_liger > compiled > eager_liger  # as measured: 17,631 > 17,465 > 15,109
    assert compiled_liger / compiled < 1.02  # Liger's loss alone: +0.95 % measured
    assert LIGER_LOSS_SPEEDUP < LIGER_SPEEDUP < COMPILE_LAYERS_SPEEDUP
