"""Planner against real numbers: H200 measurements and exact parameter counts from torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.errors import BadInput
from backend.planner import (
    TrainSettings,
    gpu_spec,
    plan_memory,
    predict_throughput,
    shape_from_config,
)
from backend.planner.gpu import spec_from_snapshot
from backend.planner.memory import OFFLOAD_PINNED_FRACTION, PROCESS_HOST_BYTES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ROWS = [
    json.loads(line)
    for line in (FIXTURES / "h200" / "fastchat-1b-throughput.jsonl").read_text().splitlines()
    if line.strip()
]
CONFIG = json.loads((FIXTURES / "planner" / "llama-1.35b-config.json").read_text())
SHAPE = shape_from_config(CONFIG)
H200 = gpu_spec("h200")


def settings_for(tag: str, world: int) -> TrainSettings:
    """The measured runs' settings, from their tags (see tests/fixtures/h200/README.md)."""
    micro = int(tag.split("_bs")[1][0])
    fsdp = "full_shard auto_wrap offload" if "offload" in tag else "full_shard auto_wrap"
    return TrainSettings(
        micro_batch=micro, seq=2048, nproc=world, fsdp=fsdp, trainer_gc="nogc" not in tag
    )


def test_parameter_count_matches_torch_exactly() -> None:
    import torch
    import transformers

    config = {
        "hidden_size": 256,
        "intermediate_size": 688,
        "num_hidden_layers": 3,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 1000,
    }
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config))
    real = sum(p.numel() for p in model.parameters())
    assert shape_from_config(config).n_params == real
    tied = {**config, "tie_word_embeddings": True}
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**tied))
    assert shape_from_config(tied).n_params == sum(p.numel() for p in model.parameters())


def test_h200_model_is_the_measured_1_35b() -> None:
    assert SHAPE.n_params == 1_345_423_360
    # The runs' own MFU used the same FLOPs per token: reproduce it from their tokens/s.
    for row in ROWS:
        mfu = row["tokens_per_s_per_gpu"] * SHAPE.flops_per_token(2048) / H200.peak_flops
        assert mfu == pytest.approx(row["mfu"], abs=0.0006)


def test_missing_config_keys_name_the_key() -> None:
    with pytest.raises(BadInput, match="num_hidden_layers"):
        shape_from_config({"hidden_size": 8, "num_attention_heads": 2, "vocab_size": 64})


def test_predicted_ranking_matches_measured_ranking() -> None:
    for world in (1, 2):
        rows = [r for r in ROWS if r["world"] == world]
        predicted = {
            r["tag"]: predict_throughput(SHAPE, settings_for(r["tag"], world), H200).tokens_per_s
            for r in rows
        }
        measured = {r["tag"]: r["tokens_per_s"] for r in rows}
        assert sorted(predicted, key=predicted.__getitem__) == sorted(
            measured, key=measured.__getitem__
        )


def test_offload_moves_states_to_host_and_sharding_divides_them() -> None:
    one = plan_memory(SHAPE, TrainSettings(fsdp="full_shard auto_wrap", nproc=1), H200)
    two = plan_memory(SHAPE, TrainSettings(fsdp="full_shard auto_wrap", nproc=2), H200)
    assert one.breakdown["adam m,v fp32 (sharded)"] == 8 * SHAPE.n_params
    assert two.breakdown["adam m,v fp32 (sharded)"] == 4 * SHAPE.n_params
    off = plan_memory(SHAPE, TrainSettings(fsdp="full_shard auto_wrap offload", nproc=2), H200)
    assert off.breakdown["adam m,v fp32 (sharded)"] == 0
    # 16 bytes/param of states on the host (+ FSDP's pinned staging), every rank loads fp32
    # weights plus its own libraries: the gpu-proof 3.4B offload run peaked at 71.2 GiB.
    assert off.host_ram_offload == int(16 * SHAPE.n_params * (1 + OFFLOAD_PINNED_FRACTION))
    assert off.host_ram_load == 2 * (4 * SHAPE.n_params + PROCESS_HOST_BYTES)


def test_13b_without_sharding_does_not_fit_one_h200() -> None:
    shape = shape_from_config(
        {
            "hidden_size": 5120,
            "num_hidden_layers": 40,
            "num_attention_heads": 40,
            "intermediate_size": 13824,
            "vocab_size": 32000,
        }
    )
    plan = plan_memory(shape, TrainSettings(micro_batch=1, fsdp="full_shard auto_wrap"), H200)
    assert not plan.fits and plan.headroom < 0
    assert plan.peak_allocated > 16 * shape.n_params  # states alone are 208 GB


def test_eager_attention_costs_the_scores() -> None:
    sdpa = plan_memory(SHAPE, TrainSettings(micro_batch=2, attn="sdpa"), H200)
    eager = plan_memory(SHAPE, TrainSettings(micro_batch=2, attn="eager"), H200)
    extra = eager.breakdown["activations"] - sdpa.breakdown["activations"]
    assert extra == pytest.approx(24 * 6.0 * 16 * 2048 * 2048 * 2, rel=0.01)


def test_gpu_specs_from_names_and_nvml_snapshot() -> None:
    trace = FIXTURES / "h200" / "nvml-trace-fastchat-1b-2gpu.jsonl"
    machine = json.loads(trace.read_text().splitlines()[0])
    snap = {
        "gpus": [
            {
                "name": g["name"],
                "memory_total": g["mem_total"],
                "compute_capability": f"{g['cc'][0]}.{g['cc'][1]}",
            }
            for g in machine["gpus"]
        ]
    }
    spec = spec_from_snapshot(snap)
    assert spec is not None
    assert spec.count == 2 and spec.cc == (9, 0) and spec.peak_flops == 989e12
    assert spec.memory_bytes == machine["gpus"][0]["mem_total"]
    assert gpu_spec("NVIDIA A100-SXM4-40GB").memory_gib < 40
    assert gpu_spec("NVIDIA H100 PCIe").peak_flops == 756e12
    assert not gpu_spec("v100").bf16_ok
    with pytest.raises(BadInput, match="unknown model"):
        gpu_spec("Voodoo 5")
