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
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape

# CALIBRATED (H200, 1.35B, seq 2048, 1 and 2 GPUs; max error 1.2% over the five rows without
# offload): fraction of dense peak the matmuls reach, recompute cost factor of HF's gradient
# checkpointing, and the fixed per-optimizer-step time. The per-layer micro-step overhead (FSDP
# hooks, kernel launches; x1.3 with recompute) was chosen at 40 ms for 24 layers: the five rows
# fit equally well from 0 to 60 ms, and a zero would make micro-batch size irrelevant under
# gradient accumulation, which it is not.
MATMUL_EFFICIENCY = 0.61
RECOMPUTE_FACTOR = 1.72
STEP_OVERHEAD_S = 0.088
MICRO_STEP_OVERHEAD_PER_LAYER_S = 0.04 / 24
RECOMPUTE_OVERHEAD_FACTOR = 1.3
# AdamW (foreach) + grad clipping bytes streamed per parameter shard per step.
OPTIMIZER_BYTES_PER_PARAM = 64.0
# CALIBRATED (H200 host, 1 and 2 ranks): host AdamW seconds per parameter with offload, and how
# it worsens as ranks on one node compete for the same cores and memory bandwidth.
HOST_ADAM_S_PER_PARAM = 1.50e-9
HOST_CONTENTION_EXP = 1.76
# With offload every micro-step copies fp32 param shards in (forward and backward) and grads out.
OFFLOAD_BYTES_PER_PARAM = 12.0
OFFLOAD_PCIE_BYTES_PER_S = 25e9
# Collective bandwidth per GPU (bytes/s): NVLink-class inside a node, PCIe otherwise, network
# between nodes. Only exposed time (beyond the compute it overlaps) counts.
NVLINK_BYTES_PER_S = 200e9
PCIE_BYTES_PER_S = 20e9
INTER_NODE_BYTES_PER_S = 20e9
EAGER_SLOWDOWN = 0.8


@dataclass
class ThroughputPlan:
    step_time_s: float = 0.0
    micro_step_s: float = 0.0
    compute_s: float = 0.0
    comm_s: float = 0.0
    optimizer_s: float = 0.0
    tokens_per_s: float = 0.0  # padded tokens, all GPUs
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


def predict_throughput(shape: ModelShape, s: TrainSettings, gpu: GpuSpec) -> ThroughputPlan:
    out = ThroughputPlan()
    P = shape.n_params
    N = max(1, s.shard_n)
    fpt = shape.flops_per_token(s.seq)
    out.flops_per_token = fpt
    tokens_micro = s.micro_batch * s.seq
    efficiency = MATMUL_EFFICIENCY * (EAGER_SLOWDOWN if s.attn == "eager" else 1.0)
    compute = tokens_micro * fpt / (gpu.peak_flops * efficiency)
    if s.checkpointing:
        compute *= RECOMPUTE_FACTOR
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
    overhead = MICRO_STEP_OVERHEAD_PER_LAYER_S * shape.layers
    if s.checkpointing:
        overhead *= RECOMPUTE_OVERHEAD_FACTOR
    micro = max(compute, comm) + overhead
    if s.offload:
        micro += OFFLOAD_BYTES_PER_PARAM * P / N / OFFLOAD_PCIE_BYTES_PER_S
    if s.offload:
        # Measured on 1 and 2 ranks only; beyond 2 the per-rank slowdown is held at 2's value.
        contention = min(N, 2) ** (1 + HOST_CONTENTION_EXP)
        optimizer = HOST_ADAM_S_PER_PARAM * P / N * contention
        out.notes.append("CPU offload: AdamW runs on the host and bounds the step time")
    else:
        optimizer = OPTIMIZER_BYTES_PER_PARAM * P / N / gpu.hbm_bytes_per_s
    step = s.grad_accum * micro + optimizer + STEP_OVERHEAD_S
    out.compute_s, out.comm_s, out.optimizer_s = compute, comm, optimizer
    out.micro_step_s, out.step_time_s = micro, step
    tokens_step = s.grad_accum * tokens_micro
    out.tokens_per_s_per_gpu = tokens_step / step
    out.tokens_per_s = out.tokens_per_s_per_gpu * s.world
    out.mfu = out.tokens_per_s_per_gpu * fpt / gpu.peak_flops
    return out
