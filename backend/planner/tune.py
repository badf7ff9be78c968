"""Tune: the fastest configuration the planner predicts to fit, with a reason for every change.

The search is small and exhaustive (micro-batch x checkpointing x offload), so the answer is the
model's optimum rather than a heuristic's. By default the global batch is kept (the micro-batch
only trades against gradient accumulation), because changing it changes the optimisation the
user chose; ``free_batch`` lifts that for throughput studies.
"""

from __future__ import annotations

import re
from typing import Any

from backend.planner.changes import apply_settings as _apply
from backend.planner.changes import rank_key as _rank
from backend.planner.changes import settings_reasons as _reasons
from backend.planner.estimate import (
    COMPILE_BUDGET_S,
    MIN_GAIN,
    Change,
    Estimate,
    TuneResult,
    estimate,
)
from backend.planner.gpu import GpuSpec
from backend.planner.method_search import (
    add_methods,
    is_full_fsdp,
    packs_here,
    tune_method_preset,
)
from backend.planner.packedattn import packed_kernel
from backend.planner.realdata import LengthDist, default_dist
from backend.planner.rowsearch import batch_line, packed_candidates
from backend.planner.settings import TrainSettings, settings_from_preset
from backend.planner.shape import ModelShape
from backend.planner.tune_filters import dropped_note, measured_compile_only, selective_where_needed

# FSDP activation checkpointing through ``fsdp_config`` reached HF Trainer in 4.35.
FSDP_AC_MIN_TRANSFORMERS = (4, 35)
# Strategies that re-gather parameters in backward (where Trainer's recompute gathers twice).
SHARDED_RESHARD = ("full_shard", "hybrid_shard")


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
                        recompute_layers=0 if trainer_gc or fsdp_ac else base.recompute_layers,
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
    calibration: list[dict[str, Any]] | None = None,
    compile_budget_s: float = COMPILE_BUDGET_S,
    packed_attn: str | None = None,
    compile_layers: bool = True,
) -> TuneResult:
    """The configuration with the most REAL tokens/s predicted to fit ``gpu`` AND the host's
    RAM (``host_ram`` bytes; None: unchecked), as a new preset plus its changes.

    ``packing`` None: packed candidates join when the trainwiz entry runs on a bf16 GPU
    (FastChat's own train_mem.py cannot pack). ``calibration`` None: this GPU kind's probe rows
    under TRAINWIZ_HOME correct the predictions ([] for the base model alone). Candidates whose
    predicted compile exceeds ``compile_budget_s`` are dropped with the reason.
    ``compile_layers``: packed candidates with regional compile of the decoder layers join."""
    dist = dist or default_dist()
    if calibration is None:
        from backend.planner.learned import (  # deferred: calibration rows, only when tuning
            load_rows,
        )

        calibration = load_rows(gpu.name)
    if packed_attn is None:  # looked up, never imported: the wizard has no training stack
        packed_attn = packed_kernel(preset, gpu)

    if packing is None:
        packing = packs_here(preset, gpu)
    methods = {"packing": packing, "packed_attn": packed_attn,
               "compile_budget_s": compile_budget_s}  # fmt: skip
    if not is_full_fsdp(preset):  # LoRA/QLoRA/ZeRO: the FSDP search would plan a full run
        return tune_method_preset(preset, gpu, shape, dist=dist, host_ram=host_ram,
                                  calibration=calibration, **methods)  # fmt: skip
    base = settings_from_preset(preset, gpu)
    fsdp_ac_ok = (
        base.uses_fsdp and _version(preset.environment.transformers) >= FSDP_AC_MIN_TRANSFORMERS
    )
    before = estimate(shape, base, gpu, dist, host_ram, calibration)
    pool = candidates(
        base, fsdp_ac_ok=fsdp_ac_ok, free_batch=free_batch, max_micro_batch=max_micro_batch
    )
    if packing:
        pool += packed_candidates(
            base, dist, free_batch=free_batch, packed_attn=packed_attn, layers=shape.layers,
            compile_layers=compile_layers,
        )  # fmt: skip
    estimates = [estimate(shape, s, gpu, dist, host_ram, calibration) for s in pool]
    notes: list[str] = []
    estimates = selective_where_needed(estimates)
    dropped = [(e, f"predicted compile {e.throughput.startup_s:.0f} s > budget "
                   f"{compile_budget_s:.0f} s") for e in estimates
               if e.throughput.startup_s > compile_budget_s]  # fmt: skip
    if dropped:
        notes.append(dropped_note(dropped, compile_budget_s))
        estimates = [e for e in estimates if e.throughput.startup_s <= compile_budget_s]
    own = [r for r in calibration if str(r.get("method") or "full") == "full"]
    if own:
        notes.append(
            f"predictions corrected by {len(own)} probe row(s) measured on {gpu.name} "
            "(TRAINWIZ_HOME/calibration)"
        )
    over_host = [e for e in estimates if e.memory.fits and not e.fits_host]
    if over_host and host_ram is not None:
        notes.append(
            f"{len(over_host)} configuration(s) that fit the GPU need more host RAM than "
            f"{host_ram / 2**30:.0f} GiB allows (CPU offload keeps ~16 bytes per parameter on "
            "the host): not considered"
        )
    every, estimates = estimates, [e for e in estimates if e.fits_host]
    every_fit = [e for e in estimates if e.memory.fits]  # what a probe may measure
    estimates, unmeasured = measured_compile_only(estimates, own, gpu.name)
    if unmeasured:
        notes.append(unmeasured)
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
            best = estimate(shape, s.with_(trainer_gc=False, fsdp_ac=True), gpu, dist, host_ram,
                            calibration)  # fmt: skip
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
        probe_pool=sorted(every_fit, key=_rank, reverse=True),
        dropped=dropped,
        batch=batch_line(before, best, dist),
        calibrated=len(own),
    )

    return add_methods(result, preset, gpu, shape, dist=dist, host_ram=host_ram,
                       calibration=calibration, **methods)  # fmt: skip
