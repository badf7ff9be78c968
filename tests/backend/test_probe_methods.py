"""tune --probe for methods: candidates that cannot run on this machine are skipped with the
reason and never launched (QLoRA on a CPU preset; ZeRO where deepspeed is not installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from backend.planner.gpu import GIB, gpu_spec
from backend.planner.method_search import search_methods
from backend.planner.probe import cannot_run_here, probe_methods
from backend.planner.shape import shape_from_config
from backend.preset.loader import load_preset

ROOT = Path(__file__).resolve().parents[2]
TINY = {  # presets/tiny-cpu-lora.yaml's model.tiny as a config.json
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 512,
    "max_position_embeddings": 512,
}  # fmt: skip


def test_skipped_candidates_carry_their_reason_and_launch_nothing() -> None:
    preset = load_preset(ROOT / "presets" / "tiny-cpu-lora.yaml")
    ranked, _notes = search_methods(
        preset, gpu_spec("4090"), shape_from_config(TINY), host_ram=64 * GIB
    )
    methods = {c.method.method for c in ranked}
    assert {"lora", "qlora"} <= methods and any(c.method.zero_stage for c in ranked)
    deepspeed_here = importlib.util.find_spec("deepspeed") is not None
    unrunnable = [
        c
        for c in ranked
        if c.method.method == "qlora" or (c.method.zero_stage and not deepspeed_here)
    ]
    result = probe_methods(preset, unrunnable, top=len(unrunnable), steps=2)
    assert [r.label for r in result.rows] == [c.label for c in unrunnable]
    for row in result.rows:
        assert row.source == "skipped" and row.state == "skipped" and not row.run_id
        assert (
            ("CUDA" in row.skipped) if row.label.startswith("qlora") else "deepspeed" in row.skipped
        )
    assert result.winner is None and "nothing measured" in result.notes[-1]


def test_a_cuda_preset_may_probe_qlora() -> None:
    preset = load_preset(ROOT / "presets" / "vicuna-7b-lora-1x24g.yaml")
    from backend.planner.methods import MethodSettings

    assert cannot_run_here(preset, MethodSettings("qlora")) == ""
