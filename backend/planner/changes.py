"""What tune changes and how it ranks: the order of predicted candidates, one reason per changed
field, and the preset with a candidate's settings applied. Shared by the FSDP search (tune.py)
and the method search (method_search.py: LoRA/QLoRA with packed rows, Liger, compile), so both
say the same words for the same change; apart from tune.py so neither imports the other."""

from __future__ import annotations

import math
from typing import Any

from backend.planner.estimate import MIN_GAIN, Estimate
from backend.planner.settings import TrainSettings


def rank_key(est: Estimate, epochs: float = 3.0) -> tuple[int, float, int, int, int, int]:
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


def settings_reasons(before: Estimate, after: Estimate) -> list[tuple[str, Any, Any, str]]:
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


def apply_settings(preset: Any, s: TrainSettings) -> Any:
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
