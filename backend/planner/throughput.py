"""Predicted step time, tokens/s and MFU: a small model with constants fitted on real H200 runs.

step time = grad_accum x micro-step + per-step overhead, where a micro-step is its matmul FLOPs at
a calibrated fraction of the GPU's dense peak (times the measured cost of recompute), or the FSDP
collectives when those are slower, and the per-step part is AdamW streaming its states through
HBM plus the Trainer's fixed per-step work (logging syncs, scheduler, grad-norm). CPU offload
moves AdamW to the host, which the H200 runs show dominates everything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.planner.gpu import GpuSpec
from backend.planner.memory import attention_kernel
from backend.planner.packedattn import FLEX, VARLEN
from backend.planner.realdata import LengthDist, default_dist
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape

# CALIBRATED (H200, 1.35B and 3.43B, seq 2048, 1 and 2 GPUs; the 21 runs without offload, all
# within +-12%): fraction of dense peak the matmuls reach, recompute cost factor, the fixed
# per-optimizer-step time and the per-layer micro-step overhead (FSDP hooks, kernel launches;
# x1.3 with recompute). The grid's micro-batch 1/2/8 and grad-accumulation rows separate the
# per-token from the per-micro-step cost, which the first seven rows could not.
MATMUL_EFFICIENCY = 0.44
RECOMPUTE_FACTOR = 1.32
STEP_OVERHEAD_S = 0.002
MICRO_STEP_OVERHEAD_PER_LAYER_S = 0.0037
RECOMPUTE_OVERHEAD_FACTOR = 1.3
# AdamW (foreach) + grad clipping bytes streamed per parameter shard per step.
OPTIMIZER_BYTES_PER_PARAM = 64.0
# CALIBRATED (H200 host, 1 and 2 ranks): host AdamW seconds per parameter with offload, and how
# it worsens as ranks on one node compete for the same cores and memory bandwidth.
HOST_ADAM_S_PER_PARAM = 0.74e-9
HOST_CONTENTION_EXP = 2.58
# With offload every micro-step copies fp32 param shards in (forward and backward) and grads out.
OFFLOAD_BYTES_PER_PARAM = 12.0
OFFLOAD_PCIE_BYTES_PER_S = 25e9
# CALIBRATED: per optimizer step and FSDP unit, offload's synchronous host round trips.
OFFLOAD_PER_LAYER_S = 0.038
# Collective bandwidth per GPU (bytes/s): NVLink-class inside a node, PCIe otherwise, network
# between nodes. Only exposed time (beyond the compute it overlaps) counts.
NVLINK_BYTES_PER_S = 200e9
PCIE_BYTES_PER_S = 20e9
INTER_NODE_BYTES_PER_S = 20e9
EAGER_SLOWDOWN = 0.8
# SDPA's math fallback (head_dim not a multiple of 8) upcasts to fp32 by default, so the
# attention matmuls (12·L·h·s FLOPs per token) run on CUDA cores, not tensor cores: the dense
# fp32 peak is ~1/15 of bf16 on A100/H100/H200. CALIBRATED: the fraction of that fp32 peak the
# batched s x s matmuls reach, and the fp32 score traffic per b·a·s² element (forward: scores,
# mask, softmax, probabilities; backward: their gradients).
FP32_SIMT_RATIO = 1 / 15
MATH_ATTN_EFFICIENCY = 0.9
MATH_SCORE_TRAFFIC_BYTES = 38.0
# Real data (docs/performance.md). CALIBRATED on the notes' 3.37B rows (one H200, no FSDP): the
# matmul efficiency of packed rows under flex_attention (its document mask skips other
# conversations' blocks, so attention costs the attended length, not the row), Liger's speed-up
# (fused RMSNorm/RoPE/SwiGLU and chunked linear cross-entropy: fewer memory-bound passes), and the
# fused AdamW's traffic (one pass over the states instead of foreach's several).
# Refitted on the rows of 2,048/4,096/8,192-token rows at 3.37B and 6.74B (two sessions' data,
# docs/performance.md "fitted"): a packed micro-step also pays a fixed cost per layer (flex's
# block mask, Liger's chunked loss, the Trainer's per-micro-step work) that short rows cannot
# amortise; without it the planner ranked 2,048-token rows above 8,192 (measured 0.6x).
PACKED_EFFICIENCY = 0.54
PACKED_MICRO_OVERHEAD_PER_LAYER_S = 0.003
# On the varlen kernels (flash-attn's or torch's: no block mask to build per micro-step) most of
# that cost grows with the row instead: MEASURED on one H100 at 6.74B LoRA (docs/performance.md,
# eleventh session), varlen trained at flex's rate at 8,192-token micro-steps, and one micro-step
# of 16,384 tokens gained only a few per cent over two of 8,192 where the fixed cost predicted
# +14 %. The per-layer cost is this fixed part plus the rest scaled by the micro-step's tokens
# over PACKED_OVERHEAD_TOKENS (where both kernels cost the same).
VARLEN_MICRO_FIXED_PER_LAYER_S = 0.0005
PACKED_OVERHEAD_TOKENS = 8192
LIGER_SPEEDUP = 1.20
# Without FSDP (one GPU, plain Trainer) there are no per-unit hooks: a micro-step costs about
# one launch-bound millisecond per layer; padded SDPA (FastChat's padding mask) then reaches
# PADDED_NO_FSDP_EFFICIENCY. CALIBRATED on the 3.37B rows of docs/performance.md (in-sample).
NO_FSDP_OVERHEAD_PER_LAYER_S = 0.001
PADDED_NO_FSDP_EFFICIENCY = 0.42
FUSED_OPTIMIZER_BYTES_PER_PARAM = 32.0
# Startup: flex_attention compiles on first use, longer for longer sequences (notes: 1-2 min at
# 3B/8192, ~5 min at 7B/16384 with recompute, > 4.5 min at 3B/16384). CALIBRATED on those:
# seconds at 8192 tokens per micro-step, and the growth exponent in the sequence length.
# Refitted on the cold first steps measured since (25-40 s at 2048-4096 tokens, 49 s at 3.37B
# and 63 s at 6.74B with 8192, more than 270 s at 16384): a fixed part (model warm-up, mask
# build) plus a steep one in the tokens per micro-step.
# Regional torch.compile of the decoder layers (training.compile_layers): inductor fuses the
# layer's elementwise work (residual adds, norms, SwiGLU, RoPE, PEFT's dropout) into fewer
# passes, and compiles one layer graph (forward + backward) for all layers. It does what Liger's
# layer kernels do, so under it the entry applies Liger's fused linear cross-entropy only
# (backend/entry/regional.py), priced by LIGER_LOSS_SPEEDUP instead of LIGER_SPEEDUP.
# FITTED on the compiled rows without Liger's layer kernels: 3.37B full fine-tune on the H200
# (22,794 real tok/s, b4 packed 2048) wants 1.23; 6.74B LoRA on the H100 (17,465, packed 8192,
# benchmarks/device/lora_sweep.sh) 1.28. Liger's loss alone on top: +0.95 % on that LoRA row
# (17,631). The earlier 1.06 was an estimate that priced compile on top of all of Liger's
# kernels, and predicted compile without Liger 14-18 % slow (docs/performance.md).
COMPILE_LAYERS_SPEEDUP = 1.25
LIGER_LOSS_SPEEDUP = 1.01
# Startup of regional compile: COMPILE_LAYERS_S for the layer graph around SDPA (padded rows).
# Over packed rows with flex_attention the layer graph compiles flex inside it (transformers
# calls the uncompiled flex_attention while dynamo traces), so the compile is flex's, not
# flex's plus a layer compile: MEASURED cold on fresh H100s at 6.74B LoRA, 8,192-token
# micro-steps, 47.6, 57.5 and 51.7 s (Liger's loss only) and 70.0 s (every Liger kernel),
# and 73 s for the H200's 6.74B full fine-tune, against 60 s for flex alone here; the sum
# predicted 90 s (docs/performance.md, 2026-12-07).
COMPILE_LAYERS_S = 30.0
COMPILE_LAYERS_FLEX_EXTRA_S = 0.0
# Regional compile over packed rows on torch's varlen kernel: no flex kernel inside the layer
# graph. MEASURED cold on fresh H100s at 6.74B LoRA, 8,192-token micro-steps: 14.4 s and 24.4 s
# (each the first run on its machine; 12-15 s for the next configurations on the same machine).
COMPILE_LAYERS_VARLEN_S = 20.0
FLEX_COMPILE_BASE_S = 20.0
FLEX_COMPILE_S_8K = 40.0
FLEX_COMPILE_EXP = 3.0
TORCH_COMPILE_S = 120.0


@dataclass
class ThroughputPlan:
    step_time_s: float = 0.0
    micro_step_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    optimizer_s: float = 0.0
    tokens_per_s: float = 0.0  # computed tokens (padding or row filler included), all GPUs
    real_fraction: float = 1.0  # share of computed tokens that are the data's own
    real_tokens_per_s: float = 0.0  # the data's tokens (no padding), all GPUs
    real_mfu: float = 0.0  # real tokens/s per GPU x 6N(non-embedding) / peak, as the entry logs
    epoch_time_s: float | None = None  # one pass over the data at real_tokens_per_s
    length_source: str = ""
    startup_s: float = 0.0  # compile before the first step (flex_attention, torch.compile)
    tokens_per_s_per_gpu: float = 0.0
    mfu: float = 0.0
    flops_per_token: float = 0.0
    notes: list[str] = field(default_factory=list)


def _link_bytes_per_s(gpu: GpuSpec, s: TrainSettings) -> float:
    if s.nnodes > 1:
        return INTER_NODE_BYTES_PER_S
    name = gpu.name.upper()
    if "PCIE" in name or gpu.cc in ((8, 6), (8, 9), (7, 5)):
        return PCIE_BYTES_PER_S
    return NVLINK_BYTES_PER_S


def predict_throughput(
    shape: ModelShape,
    s: TrainSettings,
    gpu: GpuSpec,
    dist: LengthDist | None = None,
    *,
    adapters: bool = False,
) -> ThroughputPlan:
    """Step time and tokens/s; with the data's lengths (or the stated default), real tokens/s.
    ``adapters``: a LoRA/QLoRA micro-step, whose packed per-micro-step cost on the varlen
    kernels is split as measured (VARLEN_MICRO_FIXED_PER_LAYER_S); a full fine-tune keeps the
    constant fitted on flex until it is measured on varlen."""
    out = ThroughputPlan()
    dist = dist or default_dist()
    P = shape.n_params
    N = max(1, s.shard_n)
    # Attention work per token: the padded sequence, or (packed, document mask) the length a
    # token really attends over.
    attended = dist.attended(s.seq) if s.packing else s.seq
    fpt = shape.flops_per_token(int(attended))
    out.flops_per_token = fpt
    tokens_micro = s.tokens_micro
    kernel = attention_kernel(shape, s)
    efficiency = MATMUL_EFFICIENCY * (EAGER_SLOWDOWN if kernel == "eager" else 1.0)
    if s.packing:
        efficiency = PACKED_EFFICIENCY
    elif not s.uses_fsdp:
        efficiency = PADDED_NO_FSDP_EFFICIENCY
    if s.liger:
        efficiency *= LIGER_LOSS_SPEEDUP if s.compile_layers else LIGER_SPEEDUP
    if s.compile_layers:
        efficiency *= COMPILE_LAYERS_SPEEDUP
    compute = tokens_micro * fpt / (gpu.peak_flops * efficiency)
    if kernel == "math":
        attn_flops = 12.0 * shape.layers * shape.hidden * s.seq * tokens_micro
        fused = attn_flops / (gpu.peak_flops * efficiency)
        fp32 = attn_flops / (gpu.peak_flops * FP32_SIMT_RATIO * MATH_ATTN_EFFICIENCY)
        scores = shape.layers * shape.heads * s.seq * tokens_micro
        compute += fp32 - fused + MATH_SCORE_TRAFFIC_BYTES * scores / gpu.hbm_bytes_per_s
        out.notes.append(
            f"head_dim {shape.head_dim} is not a multiple of 8: SDPA falls back to its math "
            "kernel (fp32 s x s scores, slow and memory-hungry); flash-attn or a model with "
            "head_dim % 8 == 0 avoids it"
        )
    # Recompute re-runs the forward of the checkpointed layers only (all, or recompute_layers).
    share = s.recomputed(shape.layers) / max(shape.layers, 1) if s.checkpointing else 0.0
    compute *= 1 + (RECOMPUTE_FACTOR - 1) * share
    # Per micro-step, each rank all-gathers bf16 params for forward and backward and
    # reduce-scatters grads; Trainer's gradient_checkpointing re-gathers once more in backward.
    comm = 0.0
    if s.world > 1:
        ring = (s.world - 1) / s.world
        if s.strategy in ("full_shard", "hybrid_shard"):
            passes = 4 if s.trainer_gc else 3
        elif s.strategy in ("shard_grad_op", "hybrid_shard_zero2"):
            passes = 2
        else:  # no_shard / DDP: one all-reduce of grads = two passes
            passes = 2
        comm = passes * 2 * P * ring / _link_bytes_per_s(gpu, s)
        if s.trainer_gc and s.strategy == "full_shard":
            out.notes.append(
                "Trainer gradient_checkpointing under full_shard re-gathers every layer in "
                "backward; fsdp_config activation_checkpointing avoids it"
            )
    per_layer = MICRO_STEP_OVERHEAD_PER_LAYER_S if s.uses_fsdp else NO_FSDP_OVERHEAD_PER_LAYER_S
    if s.packing and not s.uses_fsdp:
        per_layer = PACKED_MICRO_OVERHEAD_PER_LAYER_S
        if adapters and s.attn != FLEX:
            rest = PACKED_MICRO_OVERHEAD_PER_LAYER_S - VARLEN_MICRO_FIXED_PER_LAYER_S
            per_layer = (
                VARLEN_MICRO_FIXED_PER_LAYER_S + rest * tokens_micro / PACKED_OVERHEAD_TOKENS
            )
    overhead = per_layer * shape.layers
    overhead *= 1 + (RECOMPUTE_OVERHEAD_FACTOR - 1) * share
    micro = max(compute, comm) + overhead
    if s.offload:
        micro += OFFLOAD_BYTES_PER_PARAM * P / N / OFFLOAD_PCIE_BYTES_PER_S
    if s.offload:
        # Measured on 1 and 2 ranks only; beyond 2 the per-rank slowdown is held at 2's value.
        contention = min(N, 2) ** (1 + HOST_CONTENTION_EXP)
        optimizer = HOST_ADAM_S_PER_PARAM * P / N * contention + OFFLOAD_PER_LAYER_S * shape.layers
        out.notes.append("CPU offload: AdamW runs on the host and bounds the step time")
    else:
        per_param = (
            FUSED_OPTIMIZER_BYTES_PER_PARAM if "fused" in s.optim else OPTIMIZER_BYTES_PER_PARAM
        )
        optimizer = per_param * P / N / gpu.hbm_bytes_per_s
    step = s.grad_accum * micro + optimizer + STEP_OVERHEAD_S
    out.compute_s, out.comm_s, out.optimizer_s = compute, comm, optimizer
    out.micro_step_s, out.step_time_s = micro, step
    tokens_step = s.grad_accum * tokens_micro
    out.tokens_per_s_per_gpu = tokens_step / step
    out.tokens_per_s = out.tokens_per_s_per_gpu * s.world
    out.mfu = out.tokens_per_s_per_gpu * fpt / gpu.peak_flops
    if s.packing:
        out.real_fraction = dist.packed_fill(s.seq, s.row)
    else:
        out.real_fraction = 1.0 - dist.padding_fraction(s.seq)
    out.real_tokens_per_s = out.tokens_per_s * out.real_fraction
    out.real_mfu = (
        out.real_tokens_per_s / s.world * 6.0 * shape.n_params_no_embedding / gpu.peak_flops
    )
    if out.real_tokens_per_s:
        out.epoch_time_s = dist.epoch_tokens(s.seq) / out.real_tokens_per_s
    out.length_source = dist.source
    flex = s.packing and s.attn == FLEX
    if flex:
        out.startup_s += (
            FLEX_COMPILE_BASE_S + FLEX_COMPILE_S_8K * (tokens_micro / 8192) ** FLEX_COMPILE_EXP
        )
    if s.compile:
        out.startup_s += TORCH_COMPILE_S
    elif s.compile_layers:
        if flex:
            out.startup_s += COMPILE_LAYERS_FLEX_EXTRA_S
        elif s.packing and s.attn == VARLEN:
            out.startup_s += COMPILE_LAYERS_VARLEN_S
        else:
            out.startup_s += COMPILE_LAYERS_S
    return out
