"""Tune across training methods: LoRA, QLoRA and DeepSpeed ZeRO beside FSDP's full fine-tune.

``tune()`` searches FSDP settings; this module adds the other methods FastChat can train with
(docs/lora.md). For each method it finds the configuration (micro-batch x recompute) with the most
real tokens/s that fits the GPU *and* the host's RAM, and says what the method changes for the
result (an adapter instead of a model, a 4-bit base, host RAM for CPU-Adam). When no full
fine-tune fits, the fastest of them becomes tune's answer; otherwise they are listed beside it
as alternatives. A configuration predicted to exceed GPU memory or host RAM is never offered;
CPU offload is only offered when the host's RAM is known (``--host-ram`` or this machine's).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.i18n import _
from backend.planner.estimate import MIN_GAIN, Change, TuneResult
from backend.planner.gpu import GIB, GpuSpec
from backend.planner.methods import (
    MethodSettings,
    adapter_params,
    estimate_method,
    estimate_preset,
    method_from_preset,
)
from backend.planner.realdata import LengthDist, default_dist
from backend.planner.rowsearch import batch_line
from backend.planner.settings import TrainSettings, settings_from_preset
from backend.planner.shape import ModelShape
from backend.preset.schema import Preset

# Micro-batches tried per method (divisors of the per-rank batch, as tune keeps the global batch).
MAX_MICRO_BATCH = 64
# The learning rate a full fine-tune switched to LoRA/QLoRA gets (when its own is lower).
ADAPTER_LR = 2e-4


@dataclass
class MethodCandidate:
    """The best configuration of one method, what it changes in the preset and in the result."""

    method: MethodSettings
    estimate: Any  # backend.planner.tune.Estimate
    changes: list[Any] = field(default_factory=list)  # backend.planner.tune.Change
    result_note: str = ""

    @property
    def label(self) -> str:
        return f"{self.method.label()} {self.estimate.settings.label()}"

    def as_dict(self) -> dict[str, Any]:
        mem, thr = self.estimate.memory, self.estimate.throughput
        return {
            "method": self.method.label(),
            "settings": self.estimate.settings.label(),
            "changes": {c.path: c.new for c in self.changes},
            "result": self.result_note,
            "total_per_gpu_gib": round(mem.total_per_gpu / GIB, 2),
            "host_ram_peak_gib": round(mem.host_ram_peak / GIB, 1),
            "real_tokens_per_s": round(thr.real_tokens_per_s, 1),
        }


def is_full_fsdp(preset: Any) -> bool:
    """A full fine-tune without ZeRO: the preset tune's FSDP search is for."""
    return preset.training.method == "full" and preset.training.zero is None


def _trials(preset: Any, world: int, host_ram: int | None) -> list[MethodSettings]:
    own = [] if is_full_fsdp(preset) else [method_from_preset(preset)]
    lora = preset.training.lora
    adapters = {
        "lora_r": lora.lora_r,
        "target_modules": tuple(lora.lora_target_modules),
        "lora_dropout": lora.lora_dropout,
    }
    trials = [MethodSettings("lora", **adapters), MethodSettings("qlora", **adapters)]
    if world > 1:  # without offload, ZeRO on one GPU only adds buffers
        trials += [MethodSettings("full", zero_stage=2), MethodSettings("full", zero_stage=3)]
    if host_ram is not None:
        trials += [
            MethodSettings("full", zero_stage=2, offload_optimizer=True),
            MethodSettings("full", zero_stage=3, offload_optimizer=True),
            MethodSettings("full", zero_stage=3, offload_optimizer=True, offload_param=True),
        ]
    return own + [m for m in trials if m not in own]


def _variants(base: TrainSettings, max_micro_batch: int) -> list[TrainSettings]:
    """Micro-batch x recompute at the same global batch; padded rows, no FSDP (DeepSpeed or
    DDP shard these methods; the method model plans padded batches)."""
    per_rank = base.micro_batch * base.grad_accum
    sizes = [b for b in range(1, per_rank + 1) if per_rank % b == 0 and b <= max_micro_batch]
    return [
        base.with_(
            micro_batch=b, grad_accum=per_rank // b, trainer_gc=gc, fsdp="", fsdp_ac=False,
            packing=False, pack_tokens=0,
        )
        for b in sizes or [base.micro_batch]
        for gc in (False, True)
    ]  # fmt: skip


def result_note(shape: ModelShape, m: MethodSettings, est: Any) -> str:
    """What the method changes for the trained result (and what it costs)."""
    if m.adapters:
        trained = adapter_params(shape, m)
        note = _(
            "trains {m:.1f} M parameters (~{pct:.2g} % of the model): the output is the "
            "adapter only; merge it into the base for a full model (trainwiz export --merge)"
        ).format(m=trained / 1e6, pct=100 * trained / shape.n_params)
        if m.method == "qlora":
            note += _(
                "; 4-bit nf4 base: slight quality loss and slower steps (dequantisation), "
                "needs bitsandbytes on CUDA"
            )
        return note
    note = _("every weight is trained: the same result as a full fine-tune (DeepSpeed ZeRO-{s})")
    note = note.format(s=m.zero_stage)
    if m.offload_optimizer:
        note += _("; {what} in host RAM ({gib:.0f} GiB of it at peak), CPU-Adam steps are slower")
        what = _("optimizer states and weights") if m.offload_param else _("optimizer states")
        note = note.format(what=what, gib=est.memory.host_ram_peak / GIB)
    return note


def _changes(preset: Any, m: MethodSettings, s: TrainSettings, note: str) -> list[Any]:
    tr = preset.training
    out = []
    if tr.method != m.method:
        out.append(Change("training.method", tr.method, m.method, note))
    if tr.method == "full" and m.adapters and tr.learning_rate < ADAPTER_LR:
        why = _(
            "adapters start from zero and train a few parameters: about 10x a full "
            "fine-tune's rate (QLoRA paper: 2e-4 for 7-13B models)"
        )
        out.append(Change("training.learning_rate", tr.learning_rate, ADAPTER_LR, why))
    zero = (
        {"stage": m.zero_stage, "offload_optimizer": m.offload_optimizer,
         "offload_param": m.offload_param}
        if m.zero_stage else None
    )  # fmt: skip
    old_zero = tr.zero.model_dump() if tr.zero is not None else None
    if old_zero != zero:
        why = note if tr.method == m.method else _("the ZeRO settings of this method")
        out.append(Change("training.zero", old_zero, zero, why))
    if tr.fsdp:
        out.append(
            Change("training.fsdp", tr.fsdp, "", _("DeepSpeed/DDP shard this method, not FSDP"))
        )
    if tr.packing:
        why = _("the method's model plans padded batches (packing is not planned with it)")
        out.append(Change("training.packing", True, False, why))
    if tr.per_device_train_batch_size != s.micro_batch:
        why = _("the micro-batch with the most real tokens/s that fits")
        out.append(
            Change("training.per_device_train_batch_size", tr.per_device_train_batch_size,
                   s.micro_batch, why)
        )  # fmt: skip
    if tr.gradient_accumulation_steps != s.grad_accum:
        why = _("keeps the global batch at {n}").format(n=s.global_batch)
        out.append(
            Change("training.gradient_accumulation_steps", tr.gradient_accumulation_steps,
                   s.grad_accum, why)
        )  # fmt: skip
    if tr.gradient_checkpointing != s.trainer_gc:
        why = (
            _("recompute is needed to fit the activations")
            if s.trainer_gc
            else _("activations fit without recompute, which saves the recompute pass")
        )
        out.append(
            Change("training.gradient_checkpointing", tr.gradient_checkpointing, s.trainer_gc, why)
        )
    return out


def search_methods(
    preset: Any,
    gpu: GpuSpec,
    shape: ModelShape,
    *,
    dist: LengthDist | None = None,
    host_ram: int | None = None,
    max_micro_batch: int = MAX_MICRO_BATCH,
    calibration: list[dict[str, Any]] | None = None,
) -> tuple[list[MethodCandidate], list[str]]:
    """Each method's fastest configuration that fits GPU and host, best real tokens/s first,
    and notes on what was left out and why. ``calibration``: this GPU kind's probe rows (each
    method is corrected by its own)."""
    base = settings_from_preset(preset)
    notes: list[str] = []
    out: list[MethodCandidate] = []
    for m in _trials(preset, base.world, host_ram):
        estimates = [
            estimate_method(shape, s, m, gpu, dist, host_ram, calibration)
            for s in _variants(base, max_micro_batch)
        ]
        fitting = [e for e in estimates if e.memory.fits and e.fits_host]
        if not fitting:
            gpu_ok = [e for e in estimates if e.memory.fits]
            if gpu_ok and host_ram is not None:
                need = min(e.memory.host_ram_peak for e in gpu_ok)
                notes.append(
                    _("{label} fits the GPU but needs {need:.0f} GiB of host RAM "
                      "(the host has {have:.0f} GiB): not proposed").format(
                        label=m.label(), need=need / GIB, have=host_ram / GIB)
                )  # fmt: skip
            continue
        roomy = [e for e in fitting if not e.memory.tight] or fitting
        best = max(
            roomy,
            key=lambda e: (round(e.throughput.real_tokens_per_s, -1), -e.settings.micro_batch),
        )
        note = result_note(shape, m, best)
        out.append(MethodCandidate(m, best, _changes(preset, m, best.settings, note), note))
    if host_ram is None:
        notes.append(
            _(
                "ZeRO CPU offload was not considered: the host's RAM is unknown (pass --host-ram GIB)"
            )
        )
    out.sort(key=lambda c: c.estimate.throughput.real_tokens_per_s, reverse=True)
    return out, notes


def apply_method(preset: Any, cand: MethodCandidate) -> Any:
    """The preset with the candidate's method and settings, validated like a loaded one."""
    # only what the user set, plus the changes, so the plan renders the flags it rendered
    data = preset.model_dump(mode="json", by_alias=True, exclude_unset=True)
    tr = data["training"]
    for change in cand.changes:
        key = change.path.removeprefix("training.")
        if change.new in ("", None):
            tr.pop(key, None)  # unset (FSDP off, no ZeRO), not an empty flag
        else:
            tr[key] = change.new
    if not tr.get("fsdp"):
        tr.pop("fsdp_transformer_layer_cls_to_wrap", None)
        config = dict(tr.pop("fsdp_config", None) or {})
        config.pop("activation_checkpointing", None)
        if config:
            tr["fsdp_config"] = config
    return Preset.model_validate(data)


def add_methods(
    result: Any,
    preset: Any,
    gpu: GpuSpec,
    shape: ModelShape,
    *,
    dist: LengthDist | None,
    host_ram: int | None,
    calibration: list[dict[str, Any]] | None = None,
) -> Any:
    """tune()'s hook: list the methods beside its answer, or switch to the fastest one when no
    full fine-tune fits the GPU and the host."""
    candidates, notes = search_methods(preset, gpu, shape, dist=dist, host_ram=host_ram,
                                       calibration=calibration)  # fmt: skip
    if is_full_fsdp(preset):  # a ZeRO full fine-tune is among the candidates already
        candidates = [c for c in candidates if c.changes]
    result.methods = candidates
    after = result.after
    full_fits = after.memory.fits and after.fits_host
    if full_fits or not candidates:
        result.notes += notes
        return result
    best = candidates[0]
    # tune's "no configuration fits ... use more GPUs" is about FSDP: the note below replaces it
    result.notes = [n for n in result.notes if not n.startswith("no configuration fits")]
    result.notes.append(
        _("no full fine-tune fits both {gpu} and the host's RAM (the closest needs {need:.1f} "
          "GiB per GPU and {host:.0f} GiB of host RAM): switched to {label}; what changes for "
          "the result: {note}").format(
            gpu=gpu.name, need=after.memory.total_per_gpu / GIB,
            host=after.memory.host_ram_peak / GIB, label=best.method.label(),
            note=best.result_note)
    )  # fmt: skip
    result.notes += notes
    result.preset = apply_method(preset, best)
    result.changes = best.changes
    result.after = best.estimate
    # the batch line speaks of the configuration written, not of the FSDP search's best
    lr = next((c for c in best.changes if c.path == "training.learning_rate"), None)
    lr_note = (
        _("learning rate {old:g} -> {new:g} for the adapters").format(old=lr.old, new=lr.new)
        if lr is not None
        else None
    )
    result.batch = batch_line(result.before, best.estimate, dist or default_dist(), lr_note)
    result.methods = candidates[1:]
    return result


def method_lines(result: Any) -> list[str]:
    """Text lines for tune's alternatives (CLI and the wizard's Tune)."""
    methods = getattr(result, "methods", [])
    if not methods:
        return []
    lines = [_("other training methods that fit (real tokens/s; training.method, docs/lora.md):")]
    for c in methods:
        mem, thr = c.estimate.memory, c.estimate.throughput
        changes = ", ".join(f"{ch.path}: {ch.new!r}" for ch in c.changes)
        lines.append(
            f"  {c.label:<40} {thr.real_tokens_per_s:>9,.0f} real tokens/s  "
            f"{mem.total_per_gpu / GIB:6.2f} GiB per GPU, host RAM {mem.host_ram_peak / GIB:.1f}"
            f" GiB  ({changes})"
        )
        lines.append("    " + _("result: {note}").format(note=c.result_note))
    return lines


def tune_method_preset(
    preset: Any,
    gpu: GpuSpec,
    shape: ModelShape,
    *,
    dist: LengthDist | None,
    host_ram: int | None,
    calibration: list[dict[str, Any]] | None = None,
) -> Any:
    """tune() for a LoRA/QLoRA/ZeRO preset: its own method's fastest fitting configuration
    (kept as is unless 2 % faster), the other methods listed; another method only when its own
    cannot fit. The FSDP search would plan it as a full fine-tune, so it is not run."""
    before = estimate_preset(shape, preset, gpu, dist, host_ram, calibration)
    candidates, notes = search_methods(preset, gpu, shape, dist=dist, host_ram=host_ram,
                                       calibration=calibration)  # fmt: skip
    own_method = method_from_preset(preset)
    own = [c for c in candidates if c.method == own_method]
    others = [c for c in candidates if c.method != own_method]
    result = TuneResult(preset, [], before, before, len(candidates), notes, methods=others)
    before_fits = before.memory.fits and before.fits_host
    chosen = own[0] if own else None
    if chosen is None and not before_fits and others:
        chosen = others.pop(0)
        result.notes.insert(0, _(
            "{label} does not fit {gpu} and the host as configured: switched to {other}; what "
            "changes for the result: {note}").format(
                label=own_method.label(), gpu=gpu.name, other=chosen.method.label(),
                note=chosen.result_note)
        )  # fmt: skip
    faster = chosen is not None and (
        chosen.estimate.throughput.real_tokens_per_s
        >= before.throughput.real_tokens_per_s * (1 + MIN_GAIN)
    )
    if chosen is not None and (faster or not before_fits):
        result.preset = apply_method(preset, chosen)
        result.changes, result.after = chosen.changes, chosen.estimate
        result.batch = batch_line(before, chosen.estimate, dist or default_dist())
    elif before_fits:
        result.notes.append(_("kept as configured: within 2% of the fastest that fits"))
    return result
