"""Tune: the fastest configuration the planner predicts to fit, with a reason for every change.

The search is small and exhaustive (micro-batch x checkpointing x offload), so the answer is the
model's optimum rather than a heuristic's. By default the global batch is kept (the micro-batch
only trades against gradient accumulation), because changing it changes the optimisation the
user chose; ``free_batch`` lifts that for throughput studies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from backend.planner.gpu import GpuSpec
from backend.planner.memory import MemoryPlan, plan_memory
from backend.planner.settings import TrainSettings, settings_from_preset
from backend.planner.shape import ModelShape
from backend.planner.throughput import ThroughputPlan, predict_throughput

# FSDP activation checkpointing through ``fsdp_config`` reached HF Trainer in 4.35.
FSDP_AC_MIN_TRANSFORMERS = (4, 35)
# Strategies that re-gather parameters in backward (where Trainer's recompute gathers twice).
SHARDED_RESHARD = ("full_shard", "hybrid_shard")
# Keep the user's configuration unless the best one is predicted this much faster.
MIN_GAIN = 0.02


@dataclass
class Estimate:
    settings: TrainSettings
    memory: MemoryPlan
    throughput: ThroughputPlan


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

    @property
    def speedup(self) -> float:
        base = self.before.throughput.tokens_per_s
        return self.after.throughput.tokens_per_s / base if base else 0.0


def estimate(shape: ModelShape, settings: TrainSettings, gpu: GpuSpec) -> Estimate:
    return Estimate(
        settings, plan_memory(shape, settings, gpu), predict_throughput(shape, settings, gpu)
    )


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


def _rank(est: Estimate) -> tuple[float, int, int, int]:
    """Fastest first; at equal speed prefer FSDP's checkpointing (no extra all-gather), no
    offload, smaller micro-batch (more memory headroom)."""
    s = est.settings
    prefer_ac = 1 if (s.fsdp_ac and s.world > 1) else 0
    return (round(est.throughput.tokens_per_s, -1), prefer_ac, -int(s.offload), -s.micro_batch)


def _reasons(before: Estimate, after: Estimate) -> list[tuple[str, Any, Any, str]]:
    b, a = before.settings, after.settings
    gib = after.memory.gib
    changes: list[tuple[str, Any, Any, str]] = []
    if b.offload != a.offload:
        if a.offload:
            why = "nothing fits on the GPU without CPU offload (states move to host RAM)"
        else:
            why = (
                f"the job fits on the GPU without CPU offload ({gib(after.memory.total_per_gpu)}"
                f" of {gib(after.memory.gpu_memory)} GiB): AdamW runs on the GPU instead of the host"
            )
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


def _apply(preset: Any, s: TrainSettings) -> Any:
    tuned = preset.model_copy(deep=True)
    tr = tuned.training
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
) -> TuneResult:
    """The fastest configuration predicted to fit ``gpu``, as a new preset plus its changes."""
    base = settings_from_preset(preset)
    fsdp_ac_ok = (
        base.uses_fsdp and _version(preset.environment.transformers) >= FSDP_AC_MIN_TRANSFORMERS
    )
    before = estimate(shape, base, gpu)
    pool = candidates(
        base, fsdp_ac_ok=fsdp_ac_ok, free_batch=free_batch, max_micro_batch=max_micro_batch
    )
    estimates = [estimate(shape, s, gpu) for s in pool]
    # Prefer configurations outside the planner's error band; tight ones only if nothing else.
    fitting = [e for e in estimates if e.memory.fits and not e.memory.tight] or [
        e for e in estimates if e.memory.fits
    ]
    notes: list[str] = []
    if not fitting:
        best = min(estimates, key=lambda e: e.memory.total_per_gpu)
        notes.append(
            f"no configuration fits {gpu.name} ({best.memory.gib(gpu.memory_bytes)} GiB): the "
            f"smallest needs {best.memory.gib(best.memory.total_per_gpu)} GiB per GPU; "
            "use more GPUs or a smaller model_max_length"
        )
    else:
        best = max(fitting, key=_rank)
        keep = before.memory.fits and (
            best.throughput.tokens_per_s < before.throughput.tokens_per_s * (1 + MIN_GAIN)
        )
        if keep:
            best = before
            notes.append("batch and offload kept: already within 2% of the fastest that fits")
        s = best.settings
        if fsdp_ac_ok and s.trainer_gc and s.world > 1 and s.strategy in SHARDED_RESHARD:
            # Same memory, one all-gather per layer less in backward (HF warns about it too).
            best = estimate(shape, s.with_(trainer_gc=False, fsdp_ac=True), gpu)
    changes = [Change(*c) for c in _reasons(before, best)]
    return TuneResult(
        preset=_apply(preset, best.settings),
        changes=changes,
        before=before,
        after=best,
        candidates=len(pool),
        notes=notes,
    )
