"""LoRA, QLoRA and DeepSpeed ZeRO: memory, speed and host RAM beside FSDP's full fine-tune.

The FSDP model in ``memory.py``/``throughput.py`` is calibrated on H200 runs; the terms here are
first-principles (not yet measured, see docs/planner.md "Methods"), built from the same
activation, logits and fixed-cost terms so the methods compare on one footing:

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

from dataclasses import dataclass, field
from typing import Any

from backend.i18n import _
from backend.planner.gpu import GIB, GpuSpec
from backend.planner.memory import (
    CUDA_CONTEXT_BYTES,
    FIT_MARGIN,
    LOGIT_BYTES,
    MISC_BYTES,
    NCCL_BYTES,
    TIGHT_MARGIN,
    MemoryPlan,
    activation_bytes,
)
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape
from backend.planner.throughput import (
    HOST_ADAM_S_PER_PARAM,
    OFFLOAD_PCIE_BYTES_PER_S,
    STEP_OVERHEAD_S,
    ThroughputPlan,
    predict_throughput,
)

# nf4 with double quantisation: 4 bits + an 8-bit absmax per 64 weights + fp32 per 256 absmax.
NF4_BYTES_PER_PARAM = 0.5 + 1 / 64 + 4 / (64 * 256)
# Frozen weights do no weight-gradient matmul: forward 2N + input-grad 2N of a full step's 6N.
LORA_COMPUTE_FRACTION = 4 / 6
# bitsandbytes dequantises every 4-bit weight in forward, recompute and backward.
QLORA_SLOWDOWN = 1.35
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

    def label(self) -> str:
        parts = [self.method if not self.adapters else f"{self.method} r{self.lora_r}"]
        if self.zero_stage:
            parts.append(f"zero{self.zero_stage}")
            if self.offload_optimizer:
                parts.append("offload-opt")
            if self.offload_param:
                parts.append("offload-param")
        return " ".join(parts)


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


def module_dims(shape: ModelShape) -> dict[str, tuple[int, int]]:
    """(in, out) features of each Llama linear layer, by its module name."""
    h, kv, f = shape.hidden, shape.kv_dim, shape.ffn
    return {
        "q_proj": (h, h),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (h, h),
        "gate_proj": (h, f),
        "up_proj": (h, f),
        "down_proj": (f, h),
        "lm_head": (h, shape.vocab),
    }


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
    layers = 1 if s.checkpointing else shape.layers  # recompute keeps only one layer's
    return int(per_token * layers * s.micro_batch * s.seq)


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
    logits = int(LOGIT_BYTES * s.micro_batch * s.seq * shape.vocab)
    transient = logits if s.checkpointing else logits + recompute
    frag = int(0.1 * (acts + transient)) + (ZERO_BUCKET_BYTES if m.zero_stage else 0)
    if m.adapters:
        A = adapter_params(shape, m)
        acts += _adapter_activation_bytes(shape, s, m)
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
    # the bf16 partition of the reduced grads, and its fp32 copy unless CPU-Adam holds it
    grads = 2 * P // N + (0 if m.offload_optimizer else 4 * P // N)
    optim = 0 if m.offload_optimizer else 12 * P // N
    plan.breakdown = {
        "bf16 weights" + (" (sharded)" if m.zero_stage == 3 else ""): weights,
        "gathered layers (stage 3 prefetch)": gathered,
        "grads bf16 + fp32 (partitioned)": grads,
        "fp32 master + adam (sharded)": optim,
        "activations": acts + recompute,
        "logits + loss": logits,
    }
    plan.phases = {
        "forward/backward": weights + gathered + grads + optim + acts + transient,
        "optimizer step": weights + grads + optim,
    }
    plan.host_ram_load = 4 * P * (1 if m.zero_stage == 3 else s.nproc)
    host = (12 * P // N * s.nproc if m.offload_optimizer else 0) + (
        2 * P // N * s.nproc if m.offload_param else 0
    )
    plan.host_ram_offload = host
    plan.notes.append(f"ZeRO-{m.zero_stage} over {N} GPU(s): states divided {N} ways")
    return _finish(plan, s, gpu, frag)


def predict_method_throughput(
    shape: ModelShape, s: TrainSettings, m: MethodSettings, gpu: GpuSpec
) -> ThroughputPlan:
    """The FSDP prediction without sharding, scaled for frozen weights / 4-bit / CPU-Adam."""
    base = predict_throughput(shape, s.with_(fsdp=""), gpu)
    P = shape.n_params
    N = max(1, s.world) if m.zero_stage else 1
    out = ThroughputPlan(flops_per_token=base.flops_per_token, comm_s=base.comm_s)
    compute = base.compute_s
    optimizer = base.optimizer_s
    if m.adapters:
        compute *= LORA_COMPUTE_FRACTION * (QLORA_SLOWDOWN if m.method == "qlora" else 1.0)
        optimizer *= adapter_params(shape, m) / P
        out.comm_s = base.comm_s * adapter_params(shape, m) / P  # only adapter grads reduce
    elif m.offload_optimizer:
        optimizer = HOST_ADAM_S_PER_PARAM * P / N + 4 * P / N / OFFLOAD_PCIE_BYTES_PER_S
        out.notes.append("ZeRO CPU-Adam: the optimizer step runs on the host over PCIe")
    if m.offload_param:
        compute += 3 * 2 * P / N / OFFLOAD_PCIE_BYTES_PER_S  # weights in for fwd, recompute, bwd
    overhead = base.micro_step_s - max(base.compute_s, base.comm_s)
    micro = max(compute, out.comm_s) + overhead
    step = s.grad_accum * micro + optimizer + STEP_OVERHEAD_S
    out.compute_s, out.optimizer_s, out.micro_step_s, out.step_time_s = (
        compute,
        optimizer,
        micro,
        step,
    )
    out.tokens_per_s_per_gpu = s.grad_accum * s.micro_batch * s.seq / step
    out.tokens_per_s = out.tokens_per_s_per_gpu * s.world
    if m.adapters:  # no weight-gradient matmuls: count the FLOPs really done
        out.flops_per_token = base.flops_per_token * LORA_COMPUTE_FRACTION
    out.mfu = out.tokens_per_s_per_gpu * out.flops_per_token / gpu.peak_flops
    return out


@dataclass
class MethodProposal:
    """A method that fits where the user's full fine-tune does not, and what it changes."""

    method: MethodSettings
    memory: MemoryPlan
    throughput: ThroughputPlan
    changes: dict[str, Any] = field(default_factory=dict)  # preset path -> new value
    result_note: str = ""


RESULT_NOTES = {
    "lora": "trains low-rank adapters on a frozen base instead of every weight: the output is "
    "an adapter (merge it with trainwiz export --merge); quality is usually close to a full "
    "fine-tune for instruction tuning, but it learns less new knowledge",
    "qlora": "LoRA on a 4-bit nf4 base: the adapter is trained against quantised weights, "
    "slower (dequantisation) and slightly less accurate than LoRA; needs bitsandbytes on CUDA",
}


def propose_methods(
    shape: ModelShape, s: TrainSettings, gpu: GpuSpec, *, lora_r: int = 8
) -> list[MethodProposal]:
    """LoRA, then QLoRA, then ZeRO-3 + offload: each that fits, fastest first within kind."""
    targets = ("q_proj", "v_proj")
    trials = [
        MethodSettings("lora", lora_r=lora_r, target_modules=targets),
        MethodSettings("qlora", lora_r=lora_r, target_modules=targets),
    ]
    if s.world > 1:
        trials.insert(0, MethodSettings("full", zero_stage=3))
    trials.append(MethodSettings("full", zero_stage=3, offload_optimizer=True, offload_param=True))
    out = []
    for m in trials:
        for gc in (s.checkpointing, True):
            trial = s.with_(fsdp="", trainer_gc=gc)
            memory = plan_method_memory(shape, trial, m, gpu)
            if memory.fits:
                changes: dict[str, Any] = {"training.method": m.method}
                if m.adapters:
                    changes["training.lora.lora_r"] = m.lora_r
                if m.zero_stage:
                    changes["training.zero"] = {
                        "stage": m.zero_stage,
                        "offload_optimizer": m.offload_optimizer,
                        "offload_param": m.offload_param,
                    }
                if s.fsdp:
                    changes["training.fsdp"] = ""
                if gc and not s.checkpointing:
                    changes["training.gradient_checkpointing"] = True
                note = RESULT_NOTES.get(m.method, "same result as FSDP (every weight trained)")
                throughput = predict_method_throughput(shape, trial, m, gpu)
                out.append(MethodProposal(m, memory, throughput, changes, note))
                break
    return out


def estimate_method(shape: ModelShape, s: TrainSettings, m: MethodSettings, gpu: GpuSpec) -> Any:
    """An ``Estimate`` (tune.py's record) for a LoRA/QLoRA/ZeRO preset, for plan_preset."""
    from backend.planner.tune import Estimate

    return Estimate(
        s, plan_method_memory(shape, s, m, gpu), predict_method_throughput(shape, s, m, gpu)
    )


def estimate_preset(
    shape: ModelShape,
    preset: Any,
    gpu: GpuSpec,
    dist: Any = None,
    host_ram: int | None = None,
) -> Any:
    """The preset's estimate through the model for its method (FSDP's, with the data's length
    distribution and the host's RAM, or the one here)."""
    from backend.planner.settings import settings_from_preset
    from backend.planner.tune import estimate

    settings, method = settings_from_preset(preset), method_from_preset(preset)
    if method.adapters or method.zero_stage:
        return estimate_method(shape, settings, method, gpu)
    return estimate(shape, settings, gpu, dist, host_ram)


def proposal_lines(proposals: list[MethodProposal]) -> list[str]:
    """``trainwiz plan --tune`` lines when the full fine-tune cannot fit: what would, and how."""
    if not proposals:
        return []
    lines = [
        "# "
        + _(
            "a full fine-tune does not fit as configured; other methods that do "
            "(training.method, issue 21):"
        )
    ]
    for p in proposals:
        changes = ", ".join(f"{k}: {v!r}" for k, v in p.changes.items())
        lines.append(
            f"#   {p.method.label():<28} "
            + _("{memory} GiB per GPU, {tokens} tokens/s, host RAM {host} GiB  ({changes})").format(
                memory=f"{p.memory.gib(p.memory.total_per_gpu):6.2f}",
                tokens=f"{p.throughput.tokens_per_s:,.0f}",
                host=f"{p.memory.gib(p.memory.host_ram_peak):.1f}",
                changes=changes,
            )
        )
        lines.append("#     " + _("result: {note}").format(note=p.result_note))
    return lines
