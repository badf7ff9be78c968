"""The planner's LoRA time against `trainwiz tune`'s own LoRA probes on one H200, rows the LoRA
constants were not fitted on (docs/performance.md "LoRA tune on the H200").

The fitted rows (test_planner_methods_h200.py) ran with recompute on, one row per micro-step;
tune's pick turns recompute off and takes 8 rows. Recompute re-runs the forward, which a LoRA
step pays in full, while the saved weight-gradient matmuls are a share of the rest only; a
single factor on the whole micro-step (before) predicted the 3.37B pick 10.4 % slow.
`tests/fixtures/tune/lora/` is copied from `docs/gpu/tune/lora/tune-lora-7b/` (the calibration
file both calls wrote, the 7B call starting from the 3B call's row) and its `lengths.json`
(`trainwiz data check --json` of the 600 conversations both calls trained on).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.planner.gpu import gpu_spec
from backend.planner.methods import MethodSettings, predict_method_throughput
from backend.planner.realdata import dist_from_report
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape

LORA = Path(__file__).parents[1] / "fixtures" / "tune" / "lora"
SHAPES = {
    28: ModelShape(hidden=3072, layers=28, heads=24, kv_heads=24, ffn=8192, vocab=32000),
    32: ModelShape(hidden=4096, layers=32, heads=32, kv_heads=32, ffn=11008, vocab=32000),
}
METHOD = MethodSettings(method="lora", lora_r=8, lora_dropout=0.05,
                        target_modules=("q_proj", "k_proj", "v_proj", "o_proj"))  # fmt: skip


def probe_rows() -> list[dict]:
    return [json.loads(x) for x in (LORA / "calibration.jsonl").read_text().splitlines()]


def predicted(row: dict) -> float:
    shape = SHAPES[row["shape"]["layers"]]
    assert shape.n_params == row["shape"]["n_params"]
    settings = TrainSettings(**row["settings"])
    dist = dist_from_report(LORA / "lengths.json")
    return predict_method_throughput(
        shape, settings, METHOD, gpu_spec("h200"), dist
    ).real_tokens_per_s


def test_the_rows_are_tunes_lora_pick_without_recompute() -> None:
    rows = probe_rows()
    assert [(r["method"], r["label"], r["settings"]["trainer_gc"]) for r in rows] == [
        ("lora", "b8 ga2 1gpu", False), ("lora", "b8 ga2 1gpu", False),
    ]  # fmt: skip
    assert [round(r["measured_real_tokens_per_s"]) for r in rows] == [10092, 6149]


def test_the_3b_pick_is_predicted_within_ten_percent() -> None:
    """Was within 5 % (+0.1 %) when the LoRA factor was fitted on this row and the b1 one; since
    the LoRA time is one model for padded and packed rows, fitted on six rows with the H100's
    packed 6.74B ones (docs/performance.md "LoRA with packed rows"), it is +8.5 % here and the
    6.74B pick -6.9 %: the padded full fine-tune model without FSDP predicts 6.74B slow against
    3.37B, which no LoRA term can tell apart."""
    row = probe_rows()[0]
    assert predicted(row) == pytest.approx(row["measured_real_tokens_per_s"], rel=0.10)


def test_the_7b_pick_is_predicted_closer_and_still_slow() -> None:
    """Still under the measured rate (said in docs/performance.md), no longer by a quarter
    (-24 % with the flat factor, -15.5 % with the recompute split, -6.9 % now)."""
    row = probe_rows()[1]
    error = predicted(row) / row["measured_real_tokens_per_s"] - 1
    assert -0.10 < error < 0
    assert error > row["predicted_real_tokens_per_s"] / row["measured_real_tokens_per_s"] - 1


def test_recompute_costs_a_lora_step_the_whole_extra_forward() -> None:
    """With every layer recomputed the prediction is the fitted one; without, the step loses
    the forward pass only (not a third of the whole step)."""
    row = probe_rows()[0]
    shape, dist, gpu = SHAPES[28], dist_from_report(LORA / "lengths.json"), gpu_spec("h200")
    plain = TrainSettings(**row["settings"])
    recompute = TrainSettings(**{**row["settings"], "trainer_gc": True})
    fast = predict_method_throughput(shape, plain, METHOD, gpu, dist)
    slow = predict_method_throughput(shape, recompute, METHOD, gpu, dist)
    assert 1.25 < slow.compute_s / fast.compute_s < 1.6
