"""Tune: the fastest configuration the planner predicts to fit, with a reason for every change.

The search is small and exhaustive (micro-batch x checkpointing x offload), so the answer is the
model's optimum rather than a heuristic's. By default the global batch is kept (the micro-batch
only trades against gradient accumulation), because changing it changes the optimisation the
user chose; ``free_batch`` lifts that for throughput studies.
"""

from __future__ import annotations

import importlib.util
import math
import re
from typing import Any

from backend.planner.estimate import MIN_GAIN, Change, Estimate, TuneResult, estimate
from backend.planner.gpu import GpuSpec
from backend.planner.method_search import add_methods, is_full_fsdp, tune_method_preset
from backend.planner.realdata import LengthDist, default_dist
from backend.planner.rowsearch import batch_line, packed_candidates
from backend.planner.settings import TrainSettings, settings_from_preset
from backend.planner.shape import ModelShape
from backend.planner.tune_filters import dropped_note, measured_compile_only, selective_where_needed

# FSDP activation checkpointing through ``fsdp_config`` reached HF Trainer in 4.35.
FSDP_AC_MIN_TRANSFORMERS = (4, 35)
# Strategies that re-gather parameters in backward (where Trainer's recompute gathers twice).
SHARDED_RESHARD = ("full_shard", "hybrid_shard")
# Compile (flex_attention's kernels, torch.compile) allowed before the first step, seconds.
COMPILE_BUDGET_S = 240.0


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


def _rank(est: Estimate, epochs: float = 3.0) -> tuple[int, float, int, int, int, int]:
    """Most steady-state REAL tokens/s first, in bins of MIN_GAIN (the planner cannot tell
    closer ones apart); then FSDP's checkpointing (no extra all-gather), no offload, smaller
    micro-batch and shorter rows (headroom). Compile time is not in the rate: it is reported
    apart and bounded by the compile budget (a candidate over it is dropped), and inductor caches
    compiled kernels on disk, so later runs of the same shape start faster. ``epochs`` is kept
    for callers; the whole-run figure is ``effective_real_tokens_per_s``."""
    s = est.settings
    prefer_ac = 1 if (s.fsdp_ac and s.world > 1) else 0
    rate = max(est.throughput.real_tokens_per_s, 1.0)
    return (
        math.floor(math.log(rate) / math.log(1 + MIN_GAIN)),
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
        if a.packing:
            # rows and samples are not the same unit: what the learning rate sees is the real
            # tokens per optimizer step, which the "optimizer step:" line compares (one verdict)
            why = (
                f"{a.global_batch} packed row(s) of {a.row} per optimizer step (was "
                f"{b.global_batch} {'rows' if b.packing else 'padded samples'}): the real "
                "tokens per step decide the "
                "learning rate (the optimizer step line)"
            )
        elif a.global_batch == b.global_batch:
            why = f"keeps the global batch at {a.global_batch}"
        else:
            why = (
                f"global batch becomes {a.global_batch} (was {b.global_batch}): "
                "re-check the learning rate"
            )
        changes.append(("training.gradient_accumulation_steps", b.grad_accum, a.grad_accum, why))
    if b.trainer_gc != a.trainer_gc:
        if a.trainer_gc:
            why = "recompute is needed to fit the activations"
        elif a.recompute_layers:
            why = "recompute only some layers instead (training.recompute_layers)"
        elif a.fsdp_ac:
            why = (
                "checkpointing moves into FSDP (fsdp_config.activation_checkpointing), which "
                "avoids Trainer's extra all-gather per layer in backward"
            )
        else:
            why = "activations fit without recompute, which saves the recompute pass"
        changes.append(("training.gradient_checkpointing", b.trainer_gc, a.trainer_gc, why))
    if b.recompute_layers != a.recompute_layers:
        n = a.recompute_layers
        why = (
            f"selective recompute: {n} decoder layers checkpointed, enough to fit; the others "
            "skip the recompute pass (the same rows without recompute do not fit)"
            if n
            else "no selective recompute"
        )
        changes.append(("training.recompute_layers", b.recompute_layers or None, n or None, why))
    if b.compile_layers != a.compile_layers:
        why = (
            f"regional torch.compile of each decoder layer: fused elementwise work; compile "
            f"~{after.throughput.startup_s:.0f} s before the first step (inside the budget), "
            "not in the rate"
            if a.compile_layers
            else "regional compile off"
        )
        changes.append(("training.compile_layers", b.compile_layers, a.compile_layers, why))
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
    # Assignments are validated one at a time: what the schema forbids together (every-layer
    # and selective recompute, whole-model and regional compile) is switched off first.
    if not s.recompute_layers and tr.recompute_layers is not None:
        tr.recompute_layers = None
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
    if s.recompute_layers and tr.recompute_layers != s.recompute_layers:
        tr.recompute_layers = s.recompute_layers
    if not s.compile_layers and tr.compile_layers:
        tr.compile_layers = False
    if tr.torch_compile != s.compile:
        tr.torch_compile = s.compile
    if s.compile_layers and not tr.compile_layers:
        tr.compile_layers = True
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
    calibration: list[dict[str, Any]] | None = None,
    compile_budget_s: float = COMPILE_BUDGET_S,
    flash_varlen: bool | None = None,
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
    if flash_varlen is None:
        # looked up, never imported: the wizard has no training stack
        flash_varlen = importlib.util.find_spec("flash_attn") is not None

    if not is_full_fsdp(preset):  # LoRA/QLoRA/ZeRO: the FSDP search would plan a full run
        return tune_method_preset(preset, gpu, shape, dist=dist, host_ram=host_ram,
                                  calibration=calibration)  # fmt: skip
    base = settings_from_preset(preset)
    fsdp_ac_ok = (
        base.uses_fsdp and _version(preset.environment.transformers) >= FSDP_AC_MIN_TRANSFORMERS
    )
    before = estimate(shape, base, gpu, dist, host_ram, calibration)
    pool = candidates(
        base, fsdp_ac_ok=fsdp_ac_ok, free_batch=free_batch, max_micro_batch=max_micro_batch
    )
    if packing is None:
        packing = (
            preset.launch.entry == "trainwiz" and preset.launch.device == "cuda" and gpu.bf16_ok
        )
    if packing:
        pool += packed_candidates(
            base, dist, free_batch=free_batch, flash_varlen=flash_varlen, layers=shape.layers,
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
    estimates, unmeasured = measured_compile_only(estimates, calibration, gpu.name)
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
                       calibration=calibration)  # fmt: skip
