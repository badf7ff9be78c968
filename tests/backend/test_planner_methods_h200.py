"""The planner's LoRA / QLoRA / ZeRO-3 terms against the H200 runs they were fitted on.

`tests/fixtures/h200/methods-7b-rows.jsonl` holds what `trainwiz launch` measured on one
H200 for a 6.74B Llama with vicuna-7b-lora-1x24g's recipe (docs/lora.md). The time constants of
``backend.planner.methods`` were fitted on these four rows (in-sample: this guards the fit and
the memory terms, it is no out-of-sample check; the first-principles terms missed tokens/s by
-30 % to -59 %). Memory and host RAM were not fitted to a factor: they follow DeepSpeed's and
PEFT's buffers as counted in the module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.planner.gpu import GIB, gpu_spec
from backend.planner.methods import (
    estimate_preset,
    method_from_preset,
    plan_method_memory,
    predict_method_throughput,
)
from backend.planner.settings import settings_from_preset
from backend.planner.shape import ModelShape
from backend.preset.loader import parse_preset_text

ROWS = Path(__file__).parents[1] / "fixtures" / "h200" / "methods-7b-rows.jsonl"
SHAPE = ModelShape(hidden=4096, layers=32, heads=32, kv_heads=32, ffn=11008, vocab=32000)
METHOD = {
    "lora": "  method: lora\n",
    "qlora": "  method: qlora\n",
    "zero3": "  zero: {stage: 3}\n",
    "zero3off": "  zero: {stage: 3, offload_optimizer: true}\n",
}
LORA = "  lora: {lora_r: 8, lora_alpha: 16, lora_dropout: 0.05, lora_target_modules: [q_proj, k_proj, v_proj, o_proj]}\n"


def preset(name: str):
    extra = METHOD[name] + (LORA if "lora" in name else "")
    return parse_preset_text(
        "schema: 1\nname: m\nmodel: {source: local, dir: /data/m}\n"
        "launch: {runner: host, device: cuda, nproc_per_node: 1}\n"
        "training:\n  data_path: /data/d.json\n  output_dir: /data/out\n  bf16: true\n"
        "  tf32: true\n  per_device_train_batch_size: 1\n  gradient_accumulation_steps: 4\n"
        "  model_max_length: 2048\n  gradient_checkpointing: true\n" + extra
    )


def rows() -> dict[str, dict]:
    return {r["name"]: r for r in map(json.loads, ROWS.read_text().splitlines())}


@pytest.mark.parametrize("name", list(METHOD))
def test_method_predictions_match_the_h200_rows(name: str) -> None:
    row, p, gpu = rows()[name], preset(name), gpu_spec("h200")
    s, m = settings_from_preset(p), method_from_preset(p)
    assert (m.method, m.zero_stage) == (row["method"] if "lora" in name else "full",
                                         3 if "zero" in name else None)  # fmt: skip
    tput = predict_method_throughput(SHAPE, s, m, gpu)
    assert tput.tokens_per_s == pytest.approx(row["tokens_per_s"], rel=0.05)
    mem = plan_method_memory(SHAPE, s, m, gpu)
    # peak allocated: within 10 % of the measured, never more than 5 % under it (QLoRA: -3.6 %)
    assert 0.95 * row["peak_alloc_gib"] <= mem.peak_allocated / GIB <= 1.10 * row["peak_alloc_gib"]
    # host RAM never under-predicted (ZeRO-Offload was SIGKILLed by the host at 125.8 GiB)
    assert mem.host_ram_peak / GIB >= 0.98 * row["host_ram_peak_gib"]


def test_zero_offload_of_7b_does_not_fit_a_128_gib_host() -> None:
    p = preset("zero3off")
    mem = plan_method_memory(
        SHAPE, settings_from_preset(p), method_from_preset(p), gpu_spec("h200")
    )
    assert mem.host_ram_peak > 115 * GIB  # what the FSDP host-RAM check allows of 128 GiB


def test_the_plan_holds_methods_to_the_host_s_ram() -> None:
    """`trainwiz plan --host-ram 128` said ZeRO-Offload fits the host; the H200's killed it."""
    gpu, host = gpu_spec("h200"), 128 * GIB
    assert not estimate_preset(SHAPE, preset("zero3off"), gpu, host_ram=host).fits_host
    assert estimate_preset(SHAPE, preset("zero3"), gpu, host_ram=host).fits_host
    assert estimate_preset(SHAPE, preset("lora"), gpu, host_ram=host).fits_host
