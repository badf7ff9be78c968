"""Tune: the fastest configuration the planner predicts to fit, with a reason for every change.

The search is small and exhaustive (micro-batch x checkpointing x offload), so the answer is the
model's optimum rather than a heuristic's. By default the global batch is kept (the micro-batch
only trades against gradient accumulation), because changing it changes the optimisation the
user chose; ``free_batch`` lifts that for throughput studies.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from backend.planner.gpu import GpuSpec
from backend.planner.memory import HOST_MARGIN, MemoryPlan, plan_memory
from backend.planner.realdata import LengthDist, default_dist
from backend.planner.settings import TrainSettings, settings_from_preset
from backend.planner.shape import ModelShape
from backend.planner.throughput import ThroughputPlan, predict_throughput

# FSDP activation checkpointing through ``fsdp_config`` reached HF Trainer in 4.35.
FSDP_AC_MIN_TRANSFORMERS = (4, 35)
# Strategies that re-gather parameters in backward (where Trainer's recompute gathers twice).
SHARDED_RESHARD = ("full_shard", "hybrid_shard")
# Keep the user's configuration unless the best one is predicted this much faster.
MIN_GAIN = 0.02
# Packed row budgets tune tries (each at least model_max_length). Longer rows compile flex
# for longer (minutes at 16384) and gain little beyond; the probe measures both.
PACK_BUDGETS = (2048, 4096, 8192, 16384)


@dataclass
class Estimate:
    settings: TrainSettings
    memory: MemoryPlan
    throughput: ThroughputPlan
    host_ram: int | None = None  # bytes of host RAM the plan is held to (None: unknown)

    @property
    def fits_host(self) -> bool:
        return self.host_ram is None or self.memory.host_ram_peak <= (1 - HOST_MARGIN) * (
            self.host_ram
        )


@dataclass
class Change:
    path: str
    old: Any
    new: Any
    reason: str


@dataclass
class TuneResult:
    preset: Any  # backend.preset.schema.Preset (Any keeps this module free of the schema import)
    changes: list[Change]
    before: Estimate
    after: Estimate
    candidates: int = 0
    notes: list[str] = field(default_factory=list)

    ranked: list[Estimate] = field(default_factory=list)  # fitting candidates, best first
    methods: list[Any] = field(default_factory=list)  # LoRA/QLoRA/ZeRO (method_search.py)

    @property
    def speedup(self) -> float:
        """Gain in REAL tokens/s (the data's tokens; padding does not count)."""
        base = self.before.throughput.real_tokens_per_s
        return self.after.throughput.real_tokens_per_s / base if base else 0.0


def estimate(
    shape: ModelShape,
    settings: TrainSettings,
    gpu: GpuSpec,
    dist: LengthDist | None = None,
    host_ram: int | None = None,
) -> Estimate:
    return Estimate(
        settings,
        plan_memory(shape, settings, gpu),
        predict_throughput(shape, settings, gpu, dist),
        host_ram,
    )


def packed_candidates(base: TrainSettings, dist: LengthDist) -> list[TrainSettings]:
    """Packed variants: row budget x rows per micro-batch x recompute, Liger and fused AdamW on,
    no CPU offload (packing exists for speed); grad accumulation keeps the real tokens per
    optimizer step near the padded configuration's (global batch x mean conversation)."""
    target = base.global_batch * max(dist.mean_tokens(base.seq), 1.0)
    tokens = [t for t in base.fsdp_tokens if t != "offload"]
    fsdp = " ".join(tokens) if base.world > 1 else ""
    out = []
    for budget in sorted({max(b, base.seq) for b in PACK_BUDGETS}):
        fill = dist.packed_fill(base.seq, budget)
        for rows in (1, 2):
            ga = max(1, round(target / (rows * budget * fill * base.world)))
            for gc in (False, True):
                out.append(
                    base.with_(
                        packing=True, pack_tokens=budget, micro_batch=rows, grad_accum=ga,
                        trainer_gc=gc and not (base.world > 1 and base.uses_fsdp),
                        fsdp_ac=gc and base.world > 1 and base.uses_fsdp,
                        fsdp=fsdp, liger=True, optim="adamw_torch_fused", attn="flex_attention",
                    )
                )  # fmt: skip
    return out


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(
    base: TrainSettings, *, fsdp_ac_ok: bool, free_batch: bool, max_micro_batch: int
) -> list[TrainSettings]:
    """Every variant worth predicting: micro-batch x checkpointing x offload."""
    per_rank = base.micro_batch * base.grad_accum
    if free_batch:
        # Powers of two: what people run, and what the calibration grid measures.
        sizes = [2**i for i in range(8) if 2**i <= max_micro_batch]
        batches = [(b, base.grad_accum) for b in sizes]
    else:
        batches = [(b, per_rank // b) for b in _divisors(per_rank) if b <= max_micro_batch]
        if base.micro_batch > max_micro_batch:
            batches.append((base.micro_batch, base.grad_accum))
    ckpts = [(False, False), (True, False)]
    if fsdp_ac_ok:
        ckpts.append((False, True))
    offloads = [False, True] if base.uses_fsdp else [False]
    out = []
    for b, ga in batches:
        for trainer_gc, fsdp_ac in ckpts:
            for offload in offloads:
                tokens = [t for t in base.fsdp_tokens if t != "offload"]
                if offload:
                    tokens.append("offload")
                out.append(
                    base.with_(
                        micro_batch=b,
                        grad_accum=ga,
                        trainer_gc=trainer_gc,
                        fsdp_ac=fsdp_ac,
                        fsdp=" ".join(tokens),
                    )
                )
    return out


def effective_real_tokens_per_s(est: Estimate, epochs: float) -> float:
    """Real tokens/s over the whole run, the compile startup included (it matters for short
    runs: a longer row may be faster per step and still finish later)."""
    thr = est.throughput
    if not thr.epoch_time_s:
        return thr.real_tokens_per_s
    run = epochs * thr.epoch_time_s
    return thr.real_tokens_per_s * run / (run + thr.startup_s)


def _rank(est: Estimate, epochs: float = 3.0) -> tuple[int, float, int, int, int, int]:
    """Most REAL tokens/s over the whole run first (the compile startup included: time to
    finish is what the user waits for), in bins of MIN_GAIN (the planner cannot tell closer
    ones apart); then FSDP's checkpointing (no extra all-gather), no offload, smaller
    micro-batch and shorter rows (headroom). The steady-state figure and the startup are
    reported separately; inductor caches compiled kernels on disk, so a later run of the same
    shape on the same machine starts faster than predicted."""
    s = est.settings
    prefer_ac = 1 if (s.fsdp_ac and s.world > 1) else 0
    effective = max(effective_real_tokens_per_s(est, epochs), 1.0)
    return (
        math.floor(math.log(effective) / math.log(1 + MIN_GAIN)),
        round(est.throughput.real_tokens_per_s, -1),
        prefer_ac,
        -int(s.offload),
        -s.micro_batch,
        -s.row,
    )


def _reasons(before: Estimate, after: Estimate) -> list[tuple[str, Any, Any, str]]:
    b, a = before.settings, after.settings
    gib = after.memory.gib
    changes: list[tuple[str, Any, Any, str]] = []
    if b.packing != a.packing:
        pad = after.throughput.length_source
        changes.append(("training.packing", b.packing, a.packing,
                        f"padding is {1 - before.throughput.real_fraction:.0%} of the padded "
                        f"batches' compute; packed rows are {a_fill(after):.0%} real tokens "
                        f"(lengths: {pad})"))  # fmt: skip
    if b.row != a.row and a.packing:
        changes.append(("training.pack_tokens", b.pack_tokens or None, a.row,
                        "the row budget with the most real tokens/s that fits"))  # fmt: skip
    if b.liger != a.liger:
        changes.append(("training.use_liger_kernel", b.liger, a.liger,
                        "fused kernels, no full logits: less memory, fewer passes "
                        "(liger-kernel joins environment.extra_packages)"))  # fmt: skip
    if b.optim != a.optim:
        changes.append(("training.optim", b.optim, a.optim,
                        "one fused kernel for AdamW instead of foreach's several passes"))  # fmt: skip
    if b.offload != a.offload:
        if a.offload:
            why = "nothing fits on the GPU without CPU offload (states move to host RAM)"
        else:
            why = (
                f"the job fits on the GPU without CPU offload ({gib(after.memory.total_per_gpu)}"
                f" of {gib(after.memory.gpu_memory)} GiB): AdamW runs on the GPU instead of the host"
            )
        changes.append(("training.fsdp", b.fsdp, a.fsdp, why))
    elif b.fsdp != a.fsdp:
        why = "one GPU: FSDP would only wrap (no sharding); packed rows run without it"
        changes.append(("training.fsdp", b.fsdp, a.fsdp, why))
    if b.micro_batch != a.micro_batch:
        bigger = a.micro_batch > b.micro_batch
        why = (
            "a larger micro-batch keeps the GPU busier per step (higher MFU) and still fits"
            if bigger
            else "a smaller micro-batch is needed to fit in GPU memory"
        )
        changes.append(("training.per_device_train_batch_size", b.micro_batch, a.micro_batch, why))
    if b.grad_accum != a.grad_accum:
        why = (
            f"keeps the global batch at {a.global_batch}"
            if a.global_batch == b.global_batch
            else f"global batch becomes {a.global_batch} (was {b.global_batch}): "
            "re-check the learning rate"
        )
        changes.append(("training.gradient_accumulation_steps", b.grad_accum, a.grad_accum, why))
    if b.trainer_gc != a.trainer_gc:
        if a.trainer_gc:
            why = "recompute is needed to fit the activations"
        elif a.fsdp_ac:
            why = (
                "checkpointing moves into FSDP (fsdp_config.activation_checkpointing), which "
                "avoids Trainer's extra all-gather per layer in backward"
            )
        else:
            why = "activations fit without recompute, which saves the recompute pass"
        changes.append(("training.gradient_checkpointing", b.trainer_gc, a.trainer_gc, why))
    if b.fsdp_ac != a.fsdp_ac:
        why = (
            "recompute inside each FSDP unit: same memory as Trainer's, no extra all-gather"
            if a.fsdp_ac
            else "activations fit without recompute"
        )
        changes.append(("training.fsdp_config.activation_checkpointing", b.fsdp_ac, a.fsdp_ac, why))
    return changes


def a_fill(est: Estimate) -> float:
    return est.throughput.real_fraction


def _apply(preset: Any, s: TrainSettings) -> Any:
    tuned = preset.model_copy(deep=True)
    tr = tuned.training
    if tr.packing != s.packing:
        tr.packing = s.packing
    if s.packing and (tr.pack_tokens or tr.model_max_length) != s.row:
        tr.pack_tokens = s.row
    if tr.use_liger_kernel != s.liger:
        tr.use_liger_kernel = s.liger
    if s.liger and not any("liger" in p for p in tuned.environment.extra_packages):
        env = tuned.environment.model_copy(deep=True)
        env.extra_packages = [*env.extra_packages, "liger-kernel"]
        tuned.environment = env  # assigned, so the preset file shows it
    if tr.optim != s.optim:
        tr.optim = s.optim
    if not s.fsdp and tr.fsdp_transformer_layer_cls_to_wrap:
        tr.fsdp_transformer_layer_cls_to_wrap = None
    if tr.per_device_train_batch_size != s.micro_batch:
        tr.per_device_train_batch_size = s.micro_batch
    if tr.gradient_accumulation_steps != s.grad_accum:
        tr.gradient_accumulation_steps = s.grad_accum
    if tr.gradient_checkpointing != s.trainer_gc:
        tr.gradient_checkpointing = s.trainer_gc
    if tr.fsdp != s.fsdp:
        tr.fsdp = s.fsdp
    config = dict(tr.fsdp_config or {})
    if bool(config.get("activation_checkpointing", False)) != s.fsdp_ac:
        if s.fsdp_ac:
            config["activation_checkpointing"] = True
        else:
            config.pop("activation_checkpointing", None)
        tr.fsdp_config = config or None
    return tuned


def tune(
    preset: Any,
    gpu: GpuSpec,
    shape: ModelShape,
    *,
    free_batch: bool = False,
    max_micro_batch: int = 64,
    dist: LengthDist | None = None,
    host_ram: int | None = None,
    packing: bool | None = None,
) -> TuneResult:
    """The configuration with the most REAL tokens/s predicted to fit ``gpu`` AND the host's
    RAM (``host_ram`` bytes; None: unchecked), as a new preset plus its changes.

    ``packing`` None: packed candidates join when the trainwiz entry runs on a bf16 GPU
    (FastChat's own train_mem.py cannot pack)."""
    dist = dist or default_dist()
    from backend.planner.method_search import is_full_fsdp, tune_method_preset

    if not is_full_fsdp(preset):  # LoRA/QLoRA/ZeRO: the FSDP search would plan a full run
        return tune_method_preset(preset, gpu, shape, dist=dist, host_ram=host_ram)
    base = settings_from_preset(preset)
    fsdp_ac_ok = (
        base.uses_fsdp and _version(preset.environment.transformers) >= FSDP_AC_MIN_TRANSFORMERS
    )
    before = estimate(shape, base, gpu, dist, host_ram)
    pool = candidates(
        base, fsdp_ac_ok=fsdp_ac_ok, free_batch=free_batch, max_micro_batch=max_micro_batch
    )
    if packing is None:
        packing = (
            preset.launch.entry == "trainwiz" and preset.launch.device == "cuda" and gpu.bf16_ok
        )
    if packing:
        pool += packed_candidates(base, dist)
    estimates = [estimate(shape, s, gpu, dist, host_ram) for s in pool]
    notes: list[str] = []
    over_host = [e for e in estimates if e.memory.fits and not e.fits_host]
    if over_host and host_ram is not None:
        notes.append(
            f"{len(over_host)} configuration(s) that fit the GPU need more host RAM than "
            f"{host_ram / 2**30:.0f} GiB allows (CPU offload keeps ~16 bytes per parameter on "
            "the host): not considered"
        )
    every, estimates = estimates, [e for e in estimates if e.fits_host]
    # Prefer configurations outside the planner's error band; tight ones only if nothing else.
    fitting = [e for e in estimates if e.memory.fits and not e.memory.tight] or [
        e for e in estimates if e.memory.fits
    ]
    if not fitting:
        best = min(estimates or every, key=lambda e: e.memory.total_per_gpu)
        notes.append(
            f"no configuration fits {gpu.name} ({best.memory.gib(gpu.memory_bytes)} GiB): the "
            f"smallest needs {best.memory.gib(best.memory.total_per_gpu)} GiB per GPU; "
            "use more GPUs or a smaller model_max_length"
        )
    else:
        epochs = float(preset.training.num_train_epochs)
        best = max(fitting, key=lambda e: _rank(e, epochs))
        keep = (
            before.memory.fits
            and before.fits_host
            and (
                best.throughput.real_tokens_per_s
                < before.throughput.real_tokens_per_s * (1 + MIN_GAIN)
            )
        )
        if keep:
            best = before
            notes.append("batch and offload kept: already within 2% of the fastest that fits")
        s = best.settings
        if fsdp_ac_ok and s.trainer_gc and s.world > 1 and s.strategy in SHARDED_RESHARD:
            # Same memory, one all-gather per layer less in backward (HF warns about it too).
            best = estimate(shape, s.with_(trainer_gc=False, fsdp_ac=True), gpu, dist, host_ram)
    changes = [Change(*c) for c in _reasons(before, best)]
    result = TuneResult(
        preset=_apply(preset, best.settings),
        changes=changes,
        before=before,
        after=best,
        candidates=len(pool),
        notes=notes,
        ranked=sorted(
            fitting, key=lambda e: _rank(e, float(preset.training.num_train_epochs)), reverse=True
        ),
    )
    from backend.planner.method_search import add_methods

    return add_methods(result, preset, gpu, shape, dist=dist, host_ram=host_ram)
