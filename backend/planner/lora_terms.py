"""What adapters change in a step beyond the matmuls: the activations frozen layers do not keep,
the dropout PEFT runs before every adapter, and QLoRA's larger activations.

Kept apart from methods.py (which combines them with the full fine-tune's model) so each term
states its own reason and measurement. Measured on one H100 80 GB (2026-12-06, 6.74B Vicuna-7B
shape, r 8 on q/k/v/o, packed rows of 8192, Liger, regional compile; docs/performance.md
"LoRA terms"): dropout 0.05 -> 0 took the peak from 47.76 to 39.86 GiB and the rate from 16,384
to 16,876 real tokens/s; the activations were 25 % under the full fine-tune's count; QLoRA's
peak was 44.52 GiB.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from backend.planner.gpu import GpuSpec
    from backend.planner.methods import MethodSettings
    from backend.planner.settings import TrainSettings
    from backend.planner.shape import ModelShape

# A frozen linear layer keeps no input for a weight gradient it does not compute. Of the inputs a
# full fine-tune keeps per layer, these are kept only for the weight gradients: the attention
# norm's output (q/k/v), the attention output (o), the MLP norm's output (gate/up) and the
# SwiGLU product (down). An adapter on a module keeps its input again (its A needs it).
INPUT_GROUPS = (
    (("q_proj", "k_proj", "v_proj"), "hidden"),
    (("o_proj",), "q_dim"),
    (("gate_proj", "up_proj"), "hidden"),
    (("down_proj",), "ffn"),
)
# QLoRA's activations over LoRA's at the same rows: prepare_model_for_kbit_training's fp32
# norms and embeddings make fp32 copies of what flows through them (one H100 row, in-sample:
# 44.52 GiB measured against 38.9 predicted without it).
QLORA_ACT_FACTOR = 1.15
# Bytes each adapted module's dropout moves per token and input feature: forward reads x and
# writes its bf16 copy and a 1-byte mask (2 + 2 + 1); backward reads the gradient and the mask
# and writes the masked gradient (2 + 1 + 2). Memory-bound: 25.6 ms of HBM time per step of
# 16,384 tokens at 6.74B on q/k/v/o against 29 ms measured (the 16,384 -> 16,876 tokens/s above).
DROPOUT_BYTES_PER_FEATURE = 10


def frozen_input_bytes(shape: ModelShape, s: TrainSettings, m: MethodSettings) -> int:
    """Activation bytes of one micro-step that a full fine-tune keeps and this adapter run does
    not: the bf16 inputs of the frozen linear layers that carry no adapter, in the layers that
    are not recomputed (a recomputed layer keeps only its input either way)."""
    dims = {"hidden": shape.hidden, "q_dim": shape.q_dim, "ffn": shape.ffn}
    per_token = sum(
        2 * dims[width] for names, width in INPUT_GROUPS if not set(names) & set(m.target_modules)
    )
    layers = shape.layers - (s.recomputed(shape.layers) if s.checkpointing else 0)
    return int(per_token * layers * s.tokens_micro)


def module_dims(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer of a Llama-style decoder (Llama, Qwen2, Mistral,
    Gemma share these module names), by its module name; q/o from heads x head_dim."""
    h, q, kv, f = shape.hidden, shape.q_dim, shape.kv_dim, shape.ffn
    return {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, f),
        "up_proj": (h, f),
        "down_proj": (f, h),
        "lm_head": (h, shape.vocab),
    }


def dropout_s(shape: ModelShape, s: TrainSettings, m: MethodSettings, gpu: GpuSpec) -> float:
    """HBM time of PEFT's dropout over one micro-step (none at lora_dropout 0, where PEFT puts
    an identity in its place); a recomputed layer runs its forward part twice."""
    if m.lora_dropout <= 0:
        return 0.0
    dims = module_dims(shape)
    features = sum(dims[n][0] for n in m.target_modules if n in dims and n != "lm_head")
    share = s.recomputed(shape.layers) / max(shape.layers, 1) if s.checkpointing else 0.0
    moved = DROPOUT_BYTES_PER_FEATURE * (1 + 0.5 * share) * features * shape.layers
    return moved * s.tokens_micro / gpu.hbm_bytes_per_s
