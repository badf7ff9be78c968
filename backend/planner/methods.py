"""LoRA, QLoRA and DeepSpeed ZeRO: memory, speed and host RAM beside FSDP's full fine-tune.

The FSDP model in ``memory.py``/``throughput.py`` is calibrated on H200 runs; the terms here are
built from the same activation, logits and fixed-cost terms (packed rows, Liger and regional
compile included), so the methods compare on one footing, and their time constants are fitted on
the measured method rows (docs/lora.md, docs/performance.md):

- LoRA: the frozen base in bf16 (2 B/param; the entry loads it in the compute dtype), the
  adapters in fp32 with their grads and Adam states (16 B/param + a foreach temporary), the same
  activations as a full fine-tune plus each adapted module's dropout copy and r-wide middle.
- QLoRA: the decoder's linear weights in 4-bit nf4 with double-quantised scales (~0.52 B/param),
  embeddings, lm_head and norms upcast to fp32 by ``prepare_model_for_kbit_training``, one
  dequantised bf16 weight alive at a time.
- ZeRO (full fine-tune): bf16 weights + fp32 master, grads and Adam (K = 12 B/param, the ZeRO
  paper's count) divided per stage: 2 shards optimizer states and grads, 3 also the weights
  (with ~2 layers gathered in flight); CPU-Adam offload moves the 12 B (and with offload_param
  the weights) to host RAM, and its step runs at the host's Adam rate over PCIe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend.planner.estimate import Estimate, estimate
from backend.planner.gpu import GIB, GpuSpec
from backend.planner.lora_terms import QLORA_ACT_FACTOR, dropout_s, frozen_input_bytes, module_dims
from backend.planner.memory import (
    CUDA_CONTEXT_BYTES,
    FIT_MARGIN,
    LIGER_LOGIT_BYTES_PER_H,
    LOGIT_BYTES,
    MISC_BYTES,
    NCCL_BYTES,
    TIGHT_MARGIN,
    MemoryPlan,
    activation_bytes,
)
from backend.planner.realdata import LengthDist
from backend.planner.settings import TrainSettings, settings_from_preset
from backend.planner.shape import ModelShape
from backend.planner.throughput import (
    HOST_ADAM_S_PER_PARAM,
    OFFLOAD_PCIE_BYTES_PER_S,
    RECOMPUTE_FACTOR,
    STEP_OVERHEAD_S,
    ThroughputPlan,
    predict_throughput,
)

# nf4 with double quantisation: 4 bits + an 8-bit absmax per 64 weights + fp32 per 256 absmax.
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
# LoRA time. Frozen weights do no weight-gradient matmul (2N of a full step's 6N FLOPs per
# token); attention, norms, activations and the loss all still run. So a LoRA micro-step is the
# full fine-tune's (its efficiency: padded or packed rows, Liger, regional compile, the
# recomputed forward) minus those matmuls, timed at the rate matmuls alone reach (at least the
# best step efficiency the planner uses, 0.687: packed, Liger, compile), plus PEFT's own work
# per adapted module (its dropout copy, the thin r-wide matmuls, their kernel launches; again in
# a recomputed forward). FITTED on six rows (docs/performance.md "LoRA with packed rows"): the
# H200's 6.74B b1 recompute row (docs/lora.md), tune's 3.37B and 6.74B b8 picks on the H200,
# one H100's 6.74B b4 padded, packed 4096 x 2 with Liger and fused AdamW, and the same with
# regional compile: -7 ... +9 %. The flat factor it replaces (1.02 x the full step, fitted on
# the b1 row alone) predicted the packed rows at 0.41x (also counting padded sequences, not
# packed rows, as the tokens of a step).
LORA_MATMUL_EFFICIENCY = 0.69
LORA_MODULE_OVERHEAD_S = 0.00015
# QLoRA: bitsandbytes dequantises every weight in forward, recompute and backward. Fitted on
# the H200's one QLoRA row (b1, recompute; in-sample) as a factor on LoRA's compute; never
# measured without recompute, where the dequantisation passes drop from three to two.
QLORA_SLOWDOWN = 1.47
# Under regional compile the rest of a QLoRA step runs as LoRA's; what is added is a pass over
# the weights per forward, backward and recompute: bitsandbytes reads the nf4 weight and writes
# it in bf16, and the matmul reads that back (0.52 + 2 + 2 bytes a parameter) at HBM bandwidth,
# whatever the micro-step's tokens. First principles, not fitted: tune's first QLoRA probe on an
# H100 (packed 8192 x 1, ga 2, Liger's loss, compile, 2026-12-09) ran 16,405 real tokens/s, this
# term predicts 16,527 (+0.7 %); the flat 1.47 factor predicted 12,465 (-24 %).
QLORA_DEQUANT_BYTES_PER_PARAM = NF4_BYTES_PER_PARAM + 2 + 2
# ZeRO-3 on the H200 (same row set): each micro-step 2.56x the unsharded prediction (the gather/
# release hooks around every module run even on one GPU), and DeepSpeed's CPU Adam 1.32x the
# host Adam rate that FSDP's offload was calibrated on. First principles predicted 2.5x / 1.5x
# the measured tokens/s.
ZERO3_MICRO_FACTOR = 2.56
ZERO_CPU_ADAM_FACTOR = 1.32
# DeepSpeed builds the fp32 gradient of one optimizer sub-group at a time (sub_group_size 1e9).
ZERO_SUB_GROUP_PARAMS = 1_000_000_000
# ZeRO adds allocator fragmentation from its bucketed reduce/gather buffers.
ZERO_BUCKET_BYTES = int(0.5 * GIB)
LLAMA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class MethodSettings:
    """What the preset's ``training.method``, ``training.lora`` and ``training.zero`` say."""

    method: str = "full"  # full | lora | qlora
    lora_r: int = 8
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    lora_dropout: float = 0.05
    zero_stage: int | None = None
    offload_optimizer: bool = False
    offload_param: bool = False

    @property
    def adapters(self) -> bool:
        return self.method in ("lora", "qlora")

    def _zero_layout(self) -> list[str]:
        """The ZeRO stage and what it offloads (empty without ZeRO)."""
        if not self.zero_stage:
            return []
        parts = [f"zero{self.zero_stage}"]
        if self.offload_optimizer:
            parts.append("offload-opt")
        if self.offload_param:
            parts.append("offload-param")
        return parts

    def kind(self) -> str:
        """What a calibration row is matched on: the method and ZeRO layout, not the rank
        (``full`` alone is FSDP's full fine-tune, the rows tune's own probe writes)."""
        return " ".join([self.method, *self._zero_layout()])

    def label(self) -> str:
        method = self.method if not self.adapters else f"{self.method} r{self.lora_r}"
        return " ".join([method, *self._zero_layout()])


def method_from_preset(preset: Any) -> MethodSettings:
    tr = preset.training
    zero = tr.zero
    return MethodSettings(
        method=tr.method,
        lora_r=tr.lora.lora_r,
        target_modules=tuple(tr.lora.lora_target_modules),
        lora_dropout=tr.lora.lora_dropout,
        zero_stage=zero.stage if zero else None,
        offload_optimizer=bool(zero and zero.offload_optimizer),
        offload_param=bool(zero and zero.offload_param),
    )


def adapter_params(shape: ModelShape, m: MethodSettings) -> int:
    """Parameters of the adapters: r·(in + out) per adapted module (lm_head once, not per layer)."""
    dims = module_dims(shape)
    total = 0
    for name in m.target_modules:
        if name not in dims:
            continue
        fan_in, fan_out = dims[name]
        total += m.lora_r * (fan_in + fan_out) * (1 if name == "lm_head" else shape.layers)
    return total


def _adapter_activation_bytes(shape: ModelShape, s: TrainSettings, m: MethodSettings) -> int:
    """Per adapted module and token: its dropout output (bf16, when dropout > 0) and A·x (r)."""
    dims = module_dims(shape)
    per_token = 0.0
    for name in m.target_modules:
        if name in dims and name != "lm_head":
            per_token += (2 * dims[name][0] if m.lora_dropout > 0 else 0) + 2 * m.lora_r
    # recompute keeps one layer's at a time, selective recompute also the layers it skips
    layers = shape.layers - s.recomputed(shape.layers) + 1 if s.checkpointing else shape.layers
    return int(per_token * layers * s.tokens_micro)


def _finish(plan: MemoryPlan, s: TrainSettings, gpu: GpuSpec, frag: int) -> MemoryPlan:
    plan.peak_allocated = max(plan.phases.values()) + MISC_BYTES
    plan.peak_reserved = plan.peak_allocated + frag
    plan.fixed = CUDA_CONTEXT_BYTES + (NCCL_BYTES if s.world > 1 else 0)
    plan.total_per_gpu = plan.peak_reserved + plan.fixed
    plan.breakdown["misc"] = MISC_BYTES
    plan.breakdown["CUDA context + NCCL"] = plan.fixed
    plan.breakdown["allocator slack"] = frag
    plan.headroom = gpu.memory_bytes - plan.total_per_gpu
    plan.fits = plan.peak_allocated + plan.fixed <= (1 - FIT_MARGIN) * gpu.memory_bytes
    plan.tight = plan.fits and plan.total_per_gpu > (1 - TIGHT_MARGIN) * gpu.memory_bytes
    plan.host_ram_peak = max(plan.host_ram_load, plan.host_ram_offload + plan.host_ram_load // 2)
    return plan


def plan_method_memory(
    shape: ModelShape, s: TrainSettings, m: MethodSettings, gpu: GpuSpec
) -> MemoryPlan:
    """Per-GPU peak and host RAM of a LoRA/QLoRA run or a ZeRO full fine-tune."""
    P = shape.n_params
    N = max(1, s.world) if m.zero_stage else 1
    plan = MemoryPlan(gpu_memory=gpu.memory_bytes)
    acts, recompute = activation_bytes(shape, s)
    if s.liger:  # fused linear cross-entropy: no b·s·V logits (as plan_memory)
        logits = int(LIGER_LOGIT_BYTES_PER_H * s.tokens_micro * shape.hidden)
    else:
        logits = int(LOGIT_BYTES * s.tokens_micro * shape.vocab)
    transient = logits if s.checkpointing else logits + recompute
    frag = int(0.1 * (acts + transient)) + (ZERO_BUCKET_BYTES if m.zero_stage else 0)
    if m.adapters:
        A = adapter_params(shape, m)
        acts += _adapter_activation_bytes(shape, s, m) - frozen_input_bytes(shape, s, m)
        if m.method == "qlora":
            acts = int(acts * QLORA_ACT_FACTOR)
        linear = P - shape.root_params - 2 * shape.hidden * shape.layers
        if m.method == "qlora":
            frozen = int(NF4_BYTES_PER_PARAM * linear) + 4 * (P - linear)
            transient += 2 * shape.hidden * shape.ffn  # one dequantised weight
            frozen_note = "frozen base nf4 4-bit (norms/embeddings fp32)"
        else:
            frozen = 2 * P // (N if m.zero_stage == 3 else 1)
            frozen_note = "frozen base bf16" + (" (ZeRO-3 sharded)" if m.zero_stage == 3 else "")
        shard = N if m.zero_stage else 1
        states = 16 * A // shard + 4 * A  # weights+grads+Adam (sharded by ZeRO) + fp32 copy
        ddp = 4 * A if s.world > 1 and not m.zero_stage else 0
        plan.breakdown = {
            frozen_note: frozen,
            "adapters + grads + adam (fp32)": states,
            "DDP buckets": ddp,
            "activations": acts + recompute,
            "logits + loss": logits,
        }
        plan.phases = {
            "forward/backward": frozen + states + ddp + acts + transient,
            "optimizer step": frozen + states + ddp,
        }
        plan.host_ram_load = 2 * P * s.nproc  # bf16 shards, quantised (QLoRA) as they load
        plan.notes.append(
            f"{A / 1e6:.1f} M adapter parameters ({100 * A / P:.2f}% of the model) are trained"
        )
        return _finish(plan, s, gpu, frag)
    if not m.zero_stage:
        raise ValueError("plan_method_memory: a full fine-tune without ZeRO is plan_memory's")
    weights = 2 * P // (N if m.zero_stage == 3 else 1)
    if m.offload_param:
        weights = 0
    gathered = 2 * 2 * shape.layer_params + 2 * shape.root_params if m.zero_stage == 3 else 0
    # the bf16 partition of the reduced grads and the fp32 grads of one optimizer sub-group; with
    # CPU-Adam the grads stream to the host bucket by bucket (measured 14.7 GiB in all at 7B)
    grads = 0 if m.offload_optimizer else 2 * P // N + 4 * min(P // N, ZERO_SUB_GROUP_PARAMS)
    optim = 0 if m.offload_optimizer else 12 * P // N
    plan.breakdown = {
        "bf16 weights" + (" (sharded)" if m.zero_stage == 3 else ""): weights,
        "gathered layers (stage 3 prefetch)": gathered,
        "grads bf16 + one fp32 sub-group": grads,
        "fp32 master + adam (sharded)": optim,
        "activations": acts + recompute,
        "logits + loss": logits,
    }
    plan.phases = {
        "forward/backward": weights + gathered + grads + optim + acts + transient,
        "optimizer step": weights + grads + optim,
    }
    plan.host_ram_load = 4 * P * (1 if m.zero_stage == 3 else s.nproc)
    # CPU-Adam holds fp32 master + Adam (12 B) and the fp32 grads (4 B) per parameter, pinned
    host = (16 * P // N * s.nproc if m.offload_optimizer else 0) + (
        2 * P // N * s.nproc if m.offload_param else 0
    )
    plan.host_ram_offload = host
    plan.notes.append(f"ZeRO-{m.zero_stage} over {N} GPU(s): states divided {N} ways")
    _finish(plan, s, gpu, frag)
    if host:  # the fp32 load (or the final save's gathered copy) comes on top: 125.8 GiB at 7B
        plan.host_ram_peak = host + plan.host_ram_load
    return plan


def adapted_modules(shape: ModelShape, m: MethodSettings) -> int:
    """How many linear modules carry an adapter (lm_head once, the others once per layer)."""
    dims = module_dims(shape)
    return sum(
        (1 if name == "lm_head" else shape.layers) for name in m.target_modules if name in dims
    )


def lora_compute_s(
    full_compute_s: float, shape: ModelShape, s: TrainSettings, gpu: GpuSpec, m: MethodSettings
) -> float:
    """A LoRA micro-step's compute from the full fine-tune's (recompute included): the frozen
    weights' gradient matmuls (2N FLOPs per token) are not done, everything else is, the
    recomputed forward whole; PEFT adds a fixed cost per adapted module (twice with recompute)."""
    share = s.recomputed(shape.layers) / max(shape.layers, 1) if s.checkpointing else 0.0
    plain = full_compute_s / (1 + (RECOMPUTE_FACTOR - 1) * share)
    saved = (
        s.tokens_micro * 2 * shape.n_params_no_embedding / (gpu.peak_flops * LORA_MATMUL_EFFICIENCY)
    )
    saved = min(saved, plain / 3)  # never more than the weight gradients' third of a step
    peft = LORA_MODULE_OVERHEAD_S * adapted_modules(shape, m) * (1 + share)
    return (
        plain - saved + (RECOMPUTE_FACTOR - 1) * share * plain + peft + dropout_s(shape, s, m, gpu)
    )


def qlora_compute_s(lora_s: float, shape: ModelShape, s: TrainSettings, gpu: GpuSpec) -> float:
    """A QLoRA micro-step from LoRA's: compiled layers add the dequantisation passes over the
    weights (one per forward, backward and recomputed forward); eager steps keep the factor
    measured on an eager, recomputed row (the dequantisation's kernels unfused there)."""
    if not s.compile_layers:
        return lora_s * QLORA_SLOWDOWN
    passes = 2 + (s.recomputed(shape.layers) / max(shape.layers, 1) if s.checkpointing else 0.0)
    weights = shape.n_params_no_embedding * QLORA_DEQUANT_BYTES_PER_PARAM
    return lora_s + passes * weights / gpu.hbm_bytes_per_s


def predict_method_throughput(
    shape: ModelShape,
    s: TrainSettings,
    m: MethodSettings,
    gpu: GpuSpec,
    dist: LengthDist | None = None,
) -> ThroughputPlan:
    """The FSDP prediction without sharding, scaled for frozen weights / 4-bit / CPU-Adam; the
    data's lengths (``dist``, else the stated default) give its real (non-pad) tokens/s, the
    figure tune ranks every method by."""
    base = predict_throughput(shape, s.with_(fsdp=""), gpu, dist, adapters=m.adapters)
    P = shape.n_params
    N = max(1, s.world) if m.zero_stage else 1
    out = ThroughputPlan(flops_per_token=base.flops_per_token, comm_s=base.comm_s)
    compute = base.compute_s
    optimizer = base.optimizer_s
    if m.adapters:
        compute = lora_compute_s(compute, shape, s, gpu, m)
        if m.method == "qlora":
            compute = qlora_compute_s(compute, shape, s, gpu)
        optimizer *= adapter_params(shape, m) / P
        out.comm_s = base.comm_s * adapter_params(shape, m) / P  # only adapter grads reduce
    elif m.offload_optimizer:
        optimizer = ZERO_CPU_ADAM_FACTOR * (
            HOST_ADAM_S_PER_PARAM * P / N + 4 * P / N / OFFLOAD_PCIE_BYTES_PER_S
        )
        out.notes.append("ZeRO CPU-Adam: the optimizer step runs on the host over PCIe")
    if m.offload_param:
        compute += 3 * 2 * P / N / OFFLOAD_PCIE_BYTES_PER_S  # weights in for fwd, recompute, bwd
    overhead = base.micro_step_s - max(base.compute_s, base.comm_s)
    micro = max(compute, out.comm_s) + overhead
    if m.zero_stage == 3:
        micro *= ZERO3_MICRO_FACTOR
    step = s.grad_accum * micro + optimizer + STEP_OVERHEAD_S
    out.compute_s, out.optimizer_s, out.micro_step_s, out.step_time_s = (
        compute,
        optimizer,
        micro,
        step,
    )
    # the tokens the GPU computes: packed rows of pack_tokens, or padded sequences
    out.tokens_per_s_per_gpu = s.grad_accum * s.tokens_micro / step
    out.tokens_per_s = out.tokens_per_s_per_gpu * s.world
    if m.adapters:  # no weight-gradient matmuls: count the FLOPs really done (as the entry)
        out.flops_per_token = base.flops_per_token - 2.0 * shape.n_params_no_embedding
    out.mfu = out.tokens_per_s_per_gpu * out.flops_per_token / gpu.peak_flops
    out.real_fraction, out.length_source, out.startup_s = (
        base.real_fraction,
        base.length_source,
        base.startup_s,
    )
    out.real_tokens_per_s = out.tokens_per_s * out.real_fraction
    # The FLOPs really done (LoRA: no weight-gradient matmuls), on real tokens only: the same
    # count the entry's metrics use, so predicted and measured real-token MFU compare.
    out.real_mfu = out.mfu * out.real_fraction
    if base.epoch_time_s and out.real_tokens_per_s:
        out.epoch_time_s = base.epoch_time_s * base.real_tokens_per_s / out.real_tokens_per_s
    return out


def estimate_method(
    shape: ModelShape,
    s: TrainSettings,
    m: MethodSettings,
    gpu: GpuSpec,
    dist: LengthDist | None = None,
    host_ram: int | None = None,
    calibration: list[dict[str, Any]] | None = None,
) -> Any:
    """An ``Estimate`` (tune.py's record) for a LoRA/QLoRA/ZeRO preset, for plan_preset; held to
    the host's RAM like FSDP's (ZeRO-Offload of 7B needs ~126 GiB: the H200 host killed it).
    ``calibration``: this GPU kind's probe rows; those of the same method correct it."""
    memory = plan_method_memory(shape, s, m, gpu)
    est = Estimate(s, memory, predict_method_throughput(shape, s, m, gpu, dist), host_ram,
                   method=m.kind())  # fmt: skip
    if calibration:
        from backend.planner.learned import (  # deferred: calibration rows, only when estimating
            adjust,
        )

        est = adjust(est, shape, calibration)
    return est


def estimate_preset(
    shape: ModelShape,
    preset: Any,
    gpu: GpuSpec,
    dist: Any = None,
    host_ram: int | None = None,
    calibration: list[dict[str, Any]] | None = None,
) -> Any:
    """The preset's estimate through the model for its method (FSDP's, with the data's length
    distribution and the host's RAM, or the one here), corrected by ``calibration``'s rows."""
    settings, method = settings_from_preset(preset, gpu), method_from_preset(preset)
    if method.adapters or method.zero_stage:
        return estimate_method(shape, settings, method, gpu, dist, host_ram, calibration)
    return estimate(shape, settings, gpu, dist, host_ram, calibration)
