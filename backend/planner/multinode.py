"""Multi-node scaling: what the slower link between nodes costs, and whether hybrid shard helps.

The single-node model (throughput.py) prices every collective at one link. Across nodes FSDP's
collectives go two ways: ``full_shard`` shards over every GPU of every node, so each all-gather
and reduce-scatter crosses the inter-node link; ``hybrid_shard`` shards inside a node (NVLink)
and only all-reduces gradient shards across nodes (each GPU's 1/g of them). Scaling efficiency
is the multi-node tokens/s per GPU over the same preset's on one node. The inter-node
bandwidth is per GPU (a node's NICs divided by its GPUs: 8 x 400 Gb/s InfiniBand = 50 GB/s,
one 100 GbE port for 8 GPUs = 1.5 GB/s), so a user can price their own fabric.

UNCALIBRATED: no multi-node measurement backs this yet (a 2-node H200 device run has not been
lent; docs/multi-node.md); it is the ring-collective arithmetic on top of the calibrated
single-node model, and says so in its notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from backend.planner.gpu import GpuSpec
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape
from backend.planner.throughput import (
    INTER_NODE_BYTES_PER_S,
    NVLINK_BYTES_PER_S,
    predict_throughput,
)

# Below this efficiency the extra nodes mostly wait on the network.
POOR_EFFICIENCY = 0.7


@dataclass
class Scaling:
    nnodes: int
    strategy: str
    comm_inter_s: float = 0.0  # per micro-step, exposed or not
    comm_intra_s: float = 0.0
    tokens_per_s: float = 0.0  # all GPUs
    single_node_tokens_per_s_per_gpu: float = 0.0
    efficiency: float = 1.0  # per-GPU throughput on N nodes / on one node
    hybrid_efficiency: float | None = None
    notes: list[str] = field(default_factory=list)


def _comm(shape: ModelShape, s: TrainSettings, strategy: str, inter: float) -> tuple[float, float]:
    """(inter-node, intra-node) collective seconds per micro-step for ``strategy``."""
    params_bytes = 2.0 * shape.n_params  # bf16 params and grads on the wire
    passes = 4 if s.trainer_gc else 3
    g, n, world = s.nproc, s.nnodes, s.world
    if strategy == "hybrid_shard":
        intra = passes * params_bytes * (g - 1) / g / NVLINK_BYTES_PER_S if g > 1 else 0.0
        cross = 2 * params_bytes / g * (n - 1) / n / inter  # all-reduce of this GPU's shard
        return cross, intra
    if strategy in ("full_shard", "shard_grad_op"):
        passes = passes if strategy == "full_shard" else 2
        return passes * params_bytes * (world - 1) / world / inter, 0.0
    return 2 * params_bytes * (world - 1) / world / inter, 0.0  # DDP / no_shard all-reduce


def _tokens_per_s(
    shape: ModelShape, s: TrainSettings, gpu: GpuSpec, comm: float, base_comm: float
) -> float:
    plan = predict_throughput(shape, s, gpu)
    # Replace the single-link collective time by the two-level one (only what compute does not
    # hide is exposed, as in throughput.py: micro = max(compute, comm) + overhead).
    micro = plan.micro_step_s - max(plan.compute_s, base_comm) + max(plan.compute_s, comm)
    step = plan.step_time_s - s.grad_accum * (plan.micro_step_s - micro)
    return s.grad_accum * s.micro_batch * s.seq / step * s.world


def scaling(
    shape: ModelShape,
    s: TrainSettings,
    gpu: GpuSpec,
    inter_node_bytes_per_s: float = INTER_NODE_BYTES_PER_S,
) -> Scaling:
    """Predicted multi-node throughput and efficiency for ``s`` (``s.nnodes`` > 1)."""
    out = Scaling(nnodes=s.nnodes, strategy=s.strategy)
    one = replace(s, nnodes=1)
    single = predict_throughput(shape, one, gpu)
    out.single_node_tokens_per_s_per_gpu = single.tokens_per_s_per_gpu
    if s.nnodes <= 1:
        out.tokens_per_s = single.tokens_per_s
        return out
    base = predict_throughput(shape, s, gpu).comm_s
    cross, intra = _comm(shape, s, s.strategy, inter_node_bytes_per_s)
    out.comm_inter_s, out.comm_intra_s = cross, intra
    out.tokens_per_s = _tokens_per_s(shape, s, gpu, cross + intra, base)
    out.efficiency = out.tokens_per_s / s.world / single.tokens_per_s_per_gpu
    if s.strategy == "full_shard" and s.nproc > 1:
        h_cross, h_intra = _comm(shape, s, "hybrid_shard", inter_node_bytes_per_s)
        hybrid = _tokens_per_s(shape, s, gpu, h_cross + h_intra, base)
        out.hybrid_efficiency = hybrid / s.world / single.tokens_per_s_per_gpu
        if out.hybrid_efficiency > out.efficiency + 0.05:
            out.notes.append(
                f"hybrid_shard (shard inside a node, replicate across): predicted "
                f"{out.hybrid_efficiency:.0%} instead of {out.efficiency:.0%}; it needs each "
                "node to hold a full copy's shard set (memory as on one node)"
            )
    if out.efficiency < POOR_EFFICIENCY:
        out.notes.append(
            f"predicted scaling efficiency {out.efficiency:.0%}: the link between nodes "
            f"({inter_node_bytes_per_s / 1e9:.1f} GB/s per GPU) bounds the step"
        )
    out.notes.append("multi-node terms are uncalibrated (no multi-node measurement yet)")
    return out


def scaling_lines(result: Scaling) -> list[str]:
    if result.nnodes <= 1:
        return []
    lines = [
        f"multi-node: {result.nnodes} nodes, {result.strategy}: "
        f"{result.tokens_per_s:,.0f} tokens/s, scaling efficiency {result.efficiency:.0%} "
        f"(inter-node collectives {result.comm_inter_s * 1e3:.1f} ms per micro-step)"
    ]
    return lines + [f"  {note}" for note in result.notes]
