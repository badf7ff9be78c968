"""Tune across training methods: LoRA, QLoRA and DeepSpeed ZeRO beside FSDP's full fine-tune.

``tune()`` searches FSDP settings; this module adds the other methods FastChat can train with
(docs/lora.md). For each method it finds the configuration with the most real tokens/s that
fits the GPU *and* the host's RAM: micro-batch x recompute on padded batches, and for LoRA/QLoRA
on the trainwiz entry also the full fine-tune's speed tools (packed rows, Liger, fused AdamW,
selective recompute, regional compile: rowsearch.packed_candidates), and says what the method
changes for the result (an adapter instead of a model, a 4-bit base, host RAM for CPU-Adam).
When no full fine-tune fits, the fastest of them becomes tune's answer; otherwise they are listed
beside it as alternatives. A configuration predicted to exceed GPU memory or host RAM is never
offered; CPU offload is only offered when the host's RAM is known (``--host-ram`` or this
machine's). Regional compile is picked on a prediction only once a probe of the same method
measured it on this GPU kind (as for a full fine-tune); until then the probe measures it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from backend.i18n import _
from backend.planner.changes import rank_key
from backend.planner.estimate import COMPILE_BUDGET_S, MIN_GAIN, Estimate, TuneResult
from backend.planner.gpu import GIB, GpuSpec
from backend.planner.method_changes import ADAPTER_LR, apply_changes, method_changes, result_note
from backend.planner.methods import (
    MethodSettings,
    estimate_method,
    estimate_preset,
    method_from_preset,
)
from backend.planner.packedattn import packed_kernel
from backend.planner.realdata import LengthDist, default_dist
from backend.planner.rowsearch import batch_line, packed_candidates
from backend.planner.settings import TrainSettings, settings_from_preset
from backend.planner.shape import ModelShape
from backend.planner.tune_filters import dropped_note, measured_compile_only, selective_where_needed

__all__ = ["ADAPTER_LR", "MethodCandidate", "add_methods", "apply_method", "method_lines",
           "probe_order", "result_note", "search_methods", "tune_method_preset"]  # fmt: skip

# Micro-batches tried per method (divisors of the per-rank batch, as tune keeps the global batch).
MAX_MICRO_BATCH = 64


@dataclass
class MethodCandidate:
    """The best configuration of one method, what it changes in the preset and in the result;
    ``pool``: every configuration of the method that fits, best predicted first (tight and
    not-yet-measured compiled ones too: what a probe may measure)."""

    method: MethodSettings
    estimate: Any  # backend.planner.estimate.Estimate
    changes: list[Any] = field(default_factory=list)  # backend.planner.estimate.Change
    result_note: str = ""
    pool: list[Any] = field(default_factory=list)
    before: Any = None  # the preset's own settings under this method (what changes compare with)
    shape: ModelShape | None = None  # the model's (result notes of the pool's configurations)

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


def packs_here(preset: Any, gpu: GpuSpec) -> bool:
    """Packed rows (and the tools that come with them) run on the trainwiz entry on a bf16 GPU;
    FastChat's own train_mem.py cannot pack (the same rule as tune's)."""
    return preset.launch.entry == "trainwiz" and preset.launch.device == "cuda" and gpu.bf16_ok


def _variants(
    base: TrainSettings,
    max_micro_batch: int,
    packed: LengthDist | None,
    packed_attn: str,
    layers: int,
) -> list[TrainSettings]:
    """Micro-batch x recompute at the same global batch on padded rows, no FSDP (DeepSpeed or
    DDP shard these methods); with ``packed`` (the data's lengths) also the full fine-tune's
    packed candidates without FSDP: rows x accumulation x recompute x Liger x fused AdamW, and
    regional compile on one GPU (the entry compiles the decoder layers through PEFT's wrapper)."""
    per_rank = base.micro_batch * base.grad_accum
    sizes = [b for b in range(1, per_rank + 1) if per_rank % b == 0 and b <= max_micro_batch]
    plain = base.with_(fsdp="", fsdp_ac=False)
    out = [
        plain.with_(
            micro_batch=b, grad_accum=per_rank // b, trainer_gc=gc, packing=False, pack_tokens=0,
            recompute_layers=0,
        )
        for b in sizes or [base.micro_batch]
        for gc in (False, True)
    ]  # fmt: skip
    if packed is not None:
        out += packed_candidates(plain, packed, packed_attn=packed_attn, layers=layers,
                                 compile_layers=base.world == 1)  # fmt: skip
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
    packing: bool | None = None,
    packed_attn: str | None = None,
    compile_budget_s: float = COMPILE_BUDGET_S,
) -> tuple[list[MethodCandidate], list[str]]:
    """Each method's fastest configuration that fits GPU and host, best real tokens/s first,
    and notes on what was left out and why. ``calibration``: this GPU kind's probe rows (each
    method is corrected by its own). ``packing`` None: LoRA/QLoRA try packed rows where the
    entry packs (``packs_here``); ``packed_attn`` None: the entry's kernel for packed rows as the planner
    reads it (backend/planner/packedattn.py)."""
    base = settings_from_preset(preset, gpu)
    dist = dist or default_dist()
    if packing is None:
        packing = packs_here(preset, gpu)
    if packed_attn is None:  # looked up, never imported: the wizard has no training stack
        packed_attn = packed_kernel(preset, gpu)
    notes: list[str] = []
    out: list[MethodCandidate] = []
    over_budget: dict[str, list[tuple[Estimate, str]]] = {}  # method label -> dropped
    unmeasured: dict[str, list[Estimate]] = {}  # method label -> compiled, not measured here
    for m in _trials(preset, base.world, host_ram):
        packed = dist if packing and m.adapters and not m.zero_stage else None
        pool = _variants(base, max_micro_batch, packed, packed_attn, shape.layers)
        if "lm_head" in m.target_modules:  # Liger's fused loss would bypass its adapter (entry)
            pool = [s for s in pool if not s.liger]
        estimates = [estimate_method(shape, s, m, gpu, dist, host_ram, calibration) for s in pool]
        estimates = selective_where_needed(estimates)
        over = [(e, "") for e in estimates if e.throughput.startup_s > compile_budget_s]
        if over:
            over_budget[m.label()] = over
            estimates = [e for e in estimates if e.throughput.startup_s <= compile_budget_s]
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
        own_rows = [r for r in calibration or [] if str(r.get("method") or "full") == m.kind()]
        best, left = _pick(fitting, own_rows, gpu)
        if left:
            unmeasured[m.label()] = [e for e in fitting if e.settings.compile_layers]
        if m.adapters and m.lora_dropout > 0:
            notes += _dropout_note(m, best, pool, shape, gpu, dist, host_ram, calibration,
                                   own_rows, compile_budget_s)  # fmt: skip
        before = estimate_method(shape, base.with_(fsdp="", fsdp_ac=False), m, gpu, dist,
                                 host_ram, calibration)  # fmt: skip
        note = result_note(shape, m, best)
        changes = method_changes(preset, m, before, best, note)
        pool_sorted = sorted(fitting, key=rank_key, reverse=True)
        out.append(MethodCandidate(m, best, changes, note, pool_sorted, before, shape))
    if over_budget:  # one line for every method: which ones, how many, which rows
        dropped = [d for rows in over_budget.values() for d in rows]
        notes.append(f"{', '.join(over_budget)}: {dropped_note(dropped, compile_budget_s)}")
    if unmeasured:
        compiled = [e for rows in unmeasured.values() for e in rows]
        notes.append(f"{', '.join(unmeasured)}: {measured_compile_only(compiled, [], gpu.name)[1]}")
    if host_ram is None:
        notes.append(
            _(
                "ZeRO CPU offload was not considered: the host's RAM is unknown (pass --host-ram GIB)"
            )
        )
    out.sort(key=lambda c: c.estimate.throughput.real_tokens_per_s, reverse=True)
    return out, notes


def _pick(fitting: list[Estimate], own_rows: list[dict[str, Any]], gpu: GpuSpec) -> tuple[Any, str]:
    """The configuration tune writes: compiled ones only once measured here, not tight when
    another fits roomily, the best ranked; and the note on compiled ones left unpicked."""
    pickable, left = measured_compile_only(fitting, own_rows, gpu.name)
    pickable = pickable or fitting
    roomy = [e for e in pickable if not e.memory.tight] or pickable
    return max(roomy, key=rank_key), left


def _dropout_note(
    m: MethodSettings,
    best: Estimate,
    pool: list[TrainSettings],
    shape: ModelShape,
    gpu: GpuSpec,
    dist: LengthDist,
    host_ram: int | None,
    calibration: list[dict[str, Any]] | None,
    own_rows: list[dict[str, Any]],
    budget_s: float,
) -> list[str]:
    """What the adapters' dropout costs, said rather than changed: PEFT runs a dropout copy of
    the input before every adapter (HBM time, and activations that can keep longer rows from
    fitting); at lora_dropout 0 it runs none. Dropout is a regularisation choice, so tune keeps
    the preset's and names the configuration it would pick without it, when that is faster."""
    m0 = replace(m, lora_dropout=0.0)
    estimates = [estimate_method(shape, s, m0, gpu, dist, host_ram, calibration) for s in pool]
    fitting = [e for e in selective_where_needed(estimates)
               if e.memory.fits and e.fits_host and e.throughput.startup_s <= budget_s]  # fmt: skip
    if not fitting:
        return []
    best0, _left = _pick(fitting, own_rows, gpu)
    rate, rate0 = best.throughput.real_tokens_per_s, best0.throughput.real_tokens_per_s
    if rate0 < rate * (1 + MIN_GAIN):
        return []
    return [_("{label}: lora_dropout {p:g} costs {pct:.0f} % of the speed: at "
              "training.lora.lora_dropout 0 (PEFT then runs no dropout; a regularisation choice "
              "that tune leaves to you) the pick would be {cfg}, {rate:,.0f} real tokens/s, "
              "{gib:.1f} GiB").format(
                label=m.label(), p=m.lora_dropout, pct=100 * (1 - rate / rate0),
                cfg=best0.settings.label(), rate=rate0,
                gib=best0.memory.total_per_gpu / GIB)]  # fmt: skip


def apply_method(preset: Any, cand: MethodCandidate) -> Any:
    """The preset with the candidate's method and settings, validated like a loaded one."""
    return apply_changes(preset, cand.changes)


def probe_order(preset: Any, candidates: list[MethodCandidate]) -> list[MethodCandidate]:
    """What ``trainwiz tune --probe`` measures, in order: every method's configurations that fit
    (compiled ones not measured yet included: the probe measures them), best predicted first,
    one per distinct GPU workload of a method (b2 x 4096 and b1 x 8192 run the same micro-step),
    each with the preset changes it writes; a tight one never alone at the head. A LoRA/QLoRA/
    ZeRO preset's own method comes first (tune keeps it wherever it fits: a QLoRA preset's probe
    measures QLoRA, not the LoRA configurations that rank above it)."""
    own = None if is_full_fsdp(preset) else method_from_preset(preset)
    seen: set[tuple[Any, ...]] = set()
    out: list[tuple[Estimate, MethodCandidate]] = []
    for cand in candidates:
        for est in cand.pool or [cand.estimate]:
            s = est.settings
            key = (cand.method, s.tokens_micro, s.grad_accum, s.checkpointing, s.recompute_layers,
                   s.liger, s.attn, s.packing, s.compile_layers, s.optim)  # fmt: skip
            if key not in seen:
                seen.add(key)
                out.append((est, cand))
    out.sort(key=lambda pair: (pair[1].method == own, rank_key(pair[0])), reverse=True)
    safe = next((i for i, (e, _c) in enumerate(out) if not e.memory.tight), 0)
    if safe > 1:  # the best that is not tight comes second
        out.insert(1, out.pop(safe))
    return [_as_candidate(preset, est, cand) for est, cand in out]


def _as_candidate(preset: Any, est: Any, cand: MethodCandidate) -> MethodCandidate:
    if est is cand.estimate or cand.shape is None:
        return cand
    note = result_note(cand.shape, cand.method, est)
    changes = method_changes(preset, cand.method, cand.before, est, note)
    return MethodCandidate(cand.method, est, changes, note, [est], cand.before, cand.shape)


def add_methods(
    result: Any,
    preset: Any,
    gpu: GpuSpec,
    shape: ModelShape,
    *,
    dist: LengthDist | None,
    host_ram: int | None,
    calibration: list[dict[str, Any]] | None = None,
    **options: Any,
) -> Any:
    """tune()'s hook: list the methods beside its answer, or switch to the fastest one when no
    full fine-tune fits the GPU and the host. ``options``: search_methods' (packing,
    packed_attn, compile_budget_s), as tune decided them for its own search."""
    candidates, notes = search_methods(preset, gpu, shape, dist=dist, host_ram=host_ram,
                                       calibration=calibration, **options)  # fmt: skip
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
    **options: Any,
) -> Any:
    """tune() for a LoRA/QLoRA/ZeRO preset: its own method's fastest fitting configuration
    (kept as is unless 2 % faster), the other methods listed; another method only when its own
    cannot fit. The FSDP search would plan it as a full fine-tune, so it is not run."""
    before = estimate_preset(shape, preset, gpu, dist, host_ram, calibration)
    candidates, notes = search_methods(preset, gpu, shape, dist=dist, host_ram=host_ram,
                                       calibration=calibration, **options)  # fmt: skip
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
