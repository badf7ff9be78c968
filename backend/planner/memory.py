"""Peak GPU memory and host RAM of a FastChat/HF Trainer job, term by term.

The model follows what FSDP (v1, as HF Trainer drives it) and a Llama forward really keep alive,
in three phases of a steady-state optimizer step: forward/backward (activations and logits live),
the end of backward (all gradients live) and ``optimizer.step`` (AdamW's foreach temporaries).
Peak allocated is the largest phase; peak reserved adds what PyTorch's caching allocator cannot
reuse across phases. Coefficients marked CALIBRATED were fitted to the H200 measurements in
``tests/fixtures/h200/fastchat-1b-throughput.jsonl`` and the calibration grid in
``tests/fixtures/planner/calibration-*.jsonl`` (in-sample; see docs/planner.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backend import units
from backend.planner.gpu import GIB, GpuSpec
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape

# CALIBRATED: bytes kept per token of a decoder layer relative to the Llama count
# 22h + 4kv + 8f (two RMSNorms with fp32 copies, q/k/v/o around SDPA, SwiGLU's four f-wide tensors).
ACT_SCALE = 0.9
# Bytes per token per layer kept under per-layer recompute: the layer input (bf16).
CKPT_BYTES_PER_H = 2.0
# CALIBRATED: bytes per logit element b·s·V (bf16 logits, fp32 upcast, log-softmax and its grad).
LOGIT_BYTES = 14.0
# CALIBRATED: allocator slack on the activation + logits segments (reserved vs allocated).
ACT_FRAG = 1.0
# CALIBRATED: GPU bytes per parameter (/N) that FSDP CPU offload still stages on the device.
OFFLOAD_STAGE_BYTES = 2.95
# CALIBRATED: reserved / allocated under CPU offload.
OFFLOAD_RESERVED_FACTOR = 1.64
# CALIBRATED: how the staged bytes fall with the shard count (P / N**OFFLOAD_STAGE_EXP).
OFFLOAD_STAGE_EXP = 1.1
# Small allocations not modelled term by term (RoPE tables, masks, NCCL work buffers in torch).
MISC_BYTES = int(0.25 * GIB)
# Outside torch's allocator: CUDA context + cuBLAS/cuDNN workspaces, and NCCL's own buffers.
CUDA_CONTEXT_BYTES = int(0.6 * GIB)
NCCL_BYTES = int(0.5 * GIB)
# Verdict margin: "fits" only when the prediction leaves this fraction of the GPU free, and
# "tight" when it leaves less than the planner's own error band (calibrated within +-10%).
FIT_MARGIN = 0.05
TIGHT_MARGIN = 0.10
# Eager attention materialises the scores: fp32 softmax + bf16 copy, per head per s x s.
EAGER_SCORE_BYTES = 6.0
# CALIBRATED (3b rows, head_dim 100): SDPA's math fallback upcasts bf16 to fp32 by default and
# keeps the fp32 probabilities (+ mask/scale leftovers) for backward: bytes per b·a·s² element
# and layer; and the transient of the one layer being run (scores, probabilities and, in
# backward, their gradients, all fp32) at its peak.
MATH_SCORE_KEPT_BYTES = 4.3
MATH_SCORE_TRANSIENT_BYTES = 7.0
# Liger kernels (docs/planner.md). The fused linear cross-entropy never builds the b·s·V logits:
# it runs the lm_head and the loss in chunks, keeping about this many bytes per token and hidden
# unit; its RMSNorm/SwiGLU keep fewer intermediates. CALIBRATED on the notes' 3.37B rows
# (packed 8192, SDPA vs SDPA + Liger: -10.5 GiB).
LIGER_LOGIT_BYTES_PER_H = 4.0
LIGER_ACT_FACTOR = 0.78
# Host RAM of a training process beyond the weights it loads: torch, CUDA and NCCL libraries,
# the tokenizer and data (measured ~3 GiB per rank on the H200 host).
PROCESS_HOST_BYTES = int(3 * GIB)
# Pinned staging buffers of FSDP CPU offload, as a fraction of the offloaded states.
OFFLOAD_PINNED_FRACTION = 0.1
# "fits the host" only with this share of host RAM left for the OS and page cache.
HOST_MARGIN = 0.10


@dataclass
class MemoryPlan:
    """Per-GPU bytes by term, the phase peaks, host RAM and the verdict against one GPU."""

    breakdown: dict[str, int] = field(default_factory=dict)  # term -> bytes (at its own peak)
    phases: dict[str, int] = field(default_factory=dict)  # phase -> allocated bytes
    peak_allocated: int = 0
    peak_reserved: int = 0
    fixed: int = 0  # CUDA context + NCCL, outside torch's counters
    total_per_gpu: int = 0  # peak_reserved + fixed: what nvidia-smi would show
    gpu_memory: int = 0
    fits: bool = False
    tight: bool = False  # fits, but inside the planner's error band: may still run out
    headroom: int = 0  # gpu_memory - total_per_gpu (negative: does not fit)
    host_ram_load: int = 0  # all ranks on the node loading fp32 weights at start
    host_ram_offload: int = 0  # states kept on the host with CPU offload
    host_ram_peak: int = 0
    notes: list[str] = field(default_factory=list)

    def gib(self, value: int) -> float:
        return units.gib(value)

    def summary(self) -> str:
        verdict = ("fits, tight" if self.tight else "fits") if self.fits else "does NOT fit"
        return (
            f"peak {self.gib(self.total_per_gpu)} GiB per GPU of {self.gib(self.gpu_memory)} GiB "
            f"({verdict}); host RAM {self.gib(self.host_ram_peak)} GiB"
        )


def attention_kernel(shape: ModelShape, s: TrainSettings) -> str:
    """Which attention really runs: "fused" (flash / memory-efficient, no s x s tensor),
    "math" (SDPA's fallback, which materialises the scores) or "eager".

    PyTorch's fused SDPA kernels need head_dim a multiple of 8 (and <= 256 for flash); other
    shapes (OpenLLaMA-3B: 3200 / 32 = 100) silently fall back to the math kernel.
    """
    if s.attn == "eager":
        return "eager"
    if s.attn == "sdpa" and (shape.head_dim % 8 or shape.head_dim > 256):
        return "math"
    return "fused"


def activation_bytes(shape: ModelShape, s: TrainSettings) -> tuple[int, int]:
    """(activations kept, transient) for one micro-batch; transient = one layer recomputed."""
    tokens = s.tokens_micro
    per_layer_tok = ACT_SCALE * (22 * shape.hidden + 4 * shape.kv_dim + 8 * shape.ffn)
    if s.liger:
        per_layer_tok *= LIGER_ACT_FACTOR
    kernel = attention_kernel(shape, s)
    scores = shape.heads * s.seq * tokens  # b·a·s² elements of one layer
    transient = per_layer_tok * tokens
    if kernel == "eager":
        per_layer_tok += EAGER_SCORE_BYTES * shape.heads * s.seq
        transient = per_layer_tok * tokens
    elif kernel == "math":
        per_layer_tok += MATH_SCORE_KEPT_BYTES * shape.heads * s.seq
        transient = per_layer_tok * tokens + MATH_SCORE_TRANSIENT_BYTES * scores
    # Embedding output, final norm (fp32 copy) and the lm_head input.
    outside = 8 * shape.hidden * tokens
    if s.checkpointing:
        # Checkpointed layers keep their input only; the others (selective recompute) keep all.
        n = s.recomputed(shape.layers)
        kept = (
            n * CKPT_BYTES_PER_H * shape.hidden * tokens
            + (shape.layers - n) * per_layer_tok * tokens
            + outside
        )
        return int(kept), int(transient)
    # Without recompute the layer being run (last forward / first backward) adds its transient
    # only beyond what it keeps anyway.
    extra = transient - per_layer_tok * tokens
    return int(shape.layers * per_layer_tok * tokens + outside), int(extra)


def _gathered(shape: ModelShape, s: TrainSettings, pc: int) -> tuple[int, str]:
    """Unsharded compute copies (+ their grads before reduce-scatter)."""
    P = shape.n_params
    if s.strategy == "none":
        # autocast caches a bf16 copy of every weight for the step; DDP adds fp32 grad buckets.
        # (kept under recompute too: measured at 6.74B, docs/performance.md)
        extra = 2 * P if s.mixed else 0
        if s.world > 1:
            extra += 4 * P
        return extra, "autocast weight copies + DDP buckets" if s.world > 1 else "autocast copies"
    if s.strategy == "shard_grad_op":
        return pc * P + 2 * pc * shape.layer_params, "all units stay gathered (shard_grad_op)"
    if s.strategy == "no_shard" and not s.mixed:
        return 0, "no_shard fp32 computes on the states themselves"
    # Root unit (embeddings, lm_head) stays gathered; ~2 layer units in flight, plus their grads.
    return pc * (shape.root_params + 2 * shape.layer_params) + 2 * pc * shape.layer_params, (
        "root unit + 2 layer units in flight + their grads"
    )


def plan_memory(shape: ModelShape, s: TrainSettings, gpu: GpuSpec) -> MemoryPlan:
    """Predict the peak per-GPU memory (allocated, reserved, nvidia-smi) and host RAM."""
    P = shape.n_params
    N = max(1, s.shard_n)
    pc = 2 if s.mixed else 4
    plan = MemoryPlan(gpu_memory=gpu.memory_bytes)

    acts, recompute = activation_bytes(shape, s)
    if s.liger:
        logits = int(LIGER_LOGIT_BYTES_PER_H * s.tokens_micro * shape.hidden)
    else:
        logits = int(LOGIT_BYTES * s.tokens_micro * shape.vocab)
    gathered, gathered_note = _gathered(shape, s, pc)
    if s.offload:
        params = grads = adam = opt_temp = 0
        staged = int(OFFLOAD_STAGE_BYTES * P / N**OFFLOAD_STAGE_EXP)
    else:
        params, grads, adam = 4 * P // N, 4 * P // N, 8 * P // N
        # torch's foreach AdamW allocates one state-sized temporary (sqrt of v); fused does not.
        opt_temp = 0 if "fused" in s.optim else 4 * P // N
        staged = 0

    plan.breakdown = {
        "params fp32 (sharded)": params,
        "grads fp32 (sharded)": grads,
        "adam m,v fp32 (sharded)": adam,
        "optimizer temporaries": opt_temp,
        "offload staging": staged,
        "gathered units": gathered,
        "activations": acts + recompute,
        "logits + loss": logits,
        "misc": MISC_BYTES,
    }
    # With recompute the logits' backward finishes before the first layer is recomputed, so
    # the two transients never coexist; without it every activation is alive at the logits.
    # Without recompute the peak is at the start of backward: every activation, the logits and
    # the first layer's attention transient. With recompute the last layers recomputed in
    # backward run while (nearly) all gradients already exist.
    transient = logits if s.checkpointing else acts + logits + recompute
    kept = acts if s.checkpointing else 0
    # Under gradient accumulation the (sharded) gradients persist across micro-steps.
    fwd_bwd = params + adam + staged + gathered + kept + transient
    if s.grad_accum > 1:
        fwd_bwd += grads
    # By the end of backward the activations of the layers not checkpointed (selective
    # recompute) are freed as backward passes them: what is left is the checkpoints' inputs.
    kept_end = kept
    if s.recompute_layers and not (s.trainer_gc or s.fsdp_ac):
        kept_end = activation_bytes(shape, s.with_(trainer_gc=True, recompute_layers=0))[0]
    bwd_end = (
        params + adam + grads + staged + gathered + (kept_end + recompute if s.checkpointing else 0)
    )
    step = params + adam + grads + opt_temp + staged
    plan.phases = {"forward/backward": fwd_bwd, "end of backward": bwd_end, "optimizer step": step}
    if s.checkpointing:
        transient = max(transient, recompute)
    plan.peak_allocated = max(plan.phases.values()) + MISC_BYTES
    # The caching allocator keeps the activation segments, then needs new ones for gradients and
    # the optimizer temporaries: reserved is close to the sum of the phases' transients.
    plan.peak_reserved = max(
        plan.peak_allocated,
        params
        + adam
        + staged
        + gathered
        + int(ACT_FRAG * (kept + transient))
        + grads
        + opt_temp
        + MISC_BYTES,
    )
    if s.offload:
        # Offload's per-unit host<->device staging fragments the cache (measured 1.7-1.9x).
        plan.peak_reserved = int(OFFLOAD_RESERVED_FACTOR * plan.peak_allocated)
    plan.fixed = CUDA_CONTEXT_BYTES + (NCCL_BYTES if s.world > 1 else 0)
    # The caching allocator frees its cached blocks and retries before it raises OOM, so reserved
    # never passes the GPU: a job whose allocations fit but whose cache would not still runs
    # (3b b4 without recompute: 129 GiB allocated, 138 reserved of 140), with cache flushes and
    # little room for fragmentation. Such a job is "tight"; one whose allocations do not fit is not.
    wanted = plan.peak_reserved + plan.fixed
    plan.peak_reserved = min(plan.peak_reserved, max(gpu.memory_bytes - plan.fixed, 0))
    plan.peak_reserved = max(plan.peak_reserved, plan.peak_allocated)
    plan.total_per_gpu = plan.peak_reserved + plan.fixed
    plan.breakdown["CUDA context + NCCL"] = plan.fixed
    plan.breakdown["allocator slack"] = plan.peak_reserved - plan.peak_allocated
    plan.headroom = gpu.memory_bytes - wanted
    need = plan.peak_allocated + plan.fixed
    plan.fits = need <= (1 - FIT_MARGIN) * gpu.memory_bytes
    plan.tight = plan.fits and wanted > (1 - TIGHT_MARGIN) * gpu.memory_bytes
    if plan.tight and wanted > gpu.memory_bytes:
        plan.notes.append(
            "allocations fit but the allocator's cache does not: expect cache flushes (slower) "
            "and a risk of a fragmentation OOM"
        )

    # Every rank loads the full fp32 model on the host before FSDP wraps it (FastChat passes no
    # dtype); with offload the sharded states then live on the host (16 bytes/param per node).
    plan.host_ram_load = 4 * P * s.nproc + PROCESS_HOST_BYTES * s.nproc
    plan.host_ram_offload = (
        int(16 * P * s.nproc // N * (1 + OFFLOAD_PINNED_FRACTION)) if s.offload else 0
    )
    plan.host_ram_peak = max(
        plan.host_ram_load, plan.host_ram_offload + 2 * P + PROCESS_HOST_BYTES * s.nproc
    )
    if gathered_note:
        plan.notes.append(f"gathered units: {gathered_note}")
    if s.world == 1 and s.uses_fsdp:
        plan.notes.append("one GPU: FSDP falls back to NO_SHARD, states are not divided")
    return plan
