"""What a training-method candidate changes in the preset and in the result, and the preset it
writes. Apart from method_search.py (which predicts and ranks) so each stays small.

A LoRA/QLoRA candidate may use the same speed tools as a full fine-tune (packed rows, Liger,
fused AdamW, selective recompute, regional compile): those changes carry tune's own reasons
(``changes.settings_reasons``), so the same change reads the same whichever search made it.
"""

from __future__ import annotations

from typing import Any

from backend.i18n import _
from backend.planner.changes import settings_reasons
from backend.planner.estimate import Change, Estimate
from backend.planner.gpu import GIB
from backend.planner.methods import MethodSettings, adapter_params
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape
from backend.preset.schema import Preset

# The learning rate a full fine-tune switched to LoRA/QLoRA gets (when its own is lower).
ADAPTER_LR = 2e-4
# Settings changes whose reason is tune's own (changes.settings_reasons): the speed tools.
SPEED_FIELDS = (
    "training.packing",
    "training.pack_tokens",
    "training.use_liger_kernel",
    "training.optim",
    "training.recompute_layers",
    "training.compile_layers",
)


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


def method_changes(
    preset: Any, m: MethodSettings, before: Estimate, after: Estimate, note: str
) -> list[Change]:
    """Every preset field the candidate changes, each with why. ``before``: the preset's own
    settings under the candidate's method (what the speed tools' reasons compare with)."""
    tr = preset.training
    s = after.settings
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
    speed = {path: (old, new, why) for path, old, new, why in settings_reasons(before, after)}
    for path in SPEED_FIELDS:
        if path in speed and (path != "training.packing" or s.packing):
            out.append(Change(path, *speed[path]))
    if tr.packing and not s.packing:
        why = _("padded batches: the fastest configuration that fits is not packed")
        out.append(Change("training.packing", True, False, why))
        if tr.pack_tokens is not None:
            out.append(Change("training.pack_tokens", tr.pack_tokens, None, why))
    out += _batch_changes(tr, s, speed)
    return out


def _batch_changes(tr: Any, s: TrainSettings, speed: dict[str, Any]) -> list[Change]:
    """Micro-batch, accumulation and recompute, in the words of the method search."""
    out = []
    if tr.per_device_train_batch_size != s.micro_batch:
        why = _("the micro-batch with the most real tokens/s that fits")
        out.append(
            Change("training.per_device_train_batch_size", tr.per_device_train_batch_size,
                   s.micro_batch, why)
        )  # fmt: skip
    if tr.gradient_accumulation_steps != s.grad_accum:
        if s.packing:  # rows are not samples: the optimizer step line compares real tokens
            why = speed.get("training.gradient_accumulation_steps", (0, 0, ""))[2]
        else:
            why = _("keeps the global batch at {n}").format(n=s.global_batch)
        out.append(
            Change("training.gradient_accumulation_steps", tr.gradient_accumulation_steps,
                   s.grad_accum, why)
        )  # fmt: skip
    if tr.gradient_checkpointing != s.trainer_gc:
        if s.trainer_gc:
            why = _("recompute is needed to fit the activations")
        elif s.recompute_layers:
            why = _("recompute only some layers instead (training.recompute_layers)")
        else:
            why = _("activations fit without recompute, which saves the recompute pass")
        out.append(
            Change("training.gradient_checkpointing", tr.gradient_checkpointing, s.trainer_gc, why)
        )
    return out


def apply_changes(preset: Any, changes: list[Change]) -> Any:
    """The preset with a candidate's changes, validated like a loaded one."""
    # only what the user set, plus the changes, so the plan renders the flags it rendered
    data = preset.model_dump(mode="json", by_alias=True, exclude_unset=True)
    tr = data["training"]
    for change in changes:
        key = change.path.removeprefix("training.")
        if change.new in ("", None):
            tr.pop(key, None)  # unset (FSDP off, no ZeRO, no selective recompute)
        else:
            tr[key] = change.new
    if not tr.get("fsdp"):
        tr.pop("fsdp_transformer_layer_cls_to_wrap", None)
        config = dict(tr.pop("fsdp_config", None) or {})
        config.pop("activation_checkpointing", None)
        if config:
            tr["fsdp_config"] = config
    if tr.get("compile_layers"):
        tr.pop("torch_compile", None)  # regional compile replaces whole-model compile
    extra = list(preset.environment.extra_packages)  # the defaults too, when unset
    if tr.get("use_liger_kernel") and not any("liger" in p for p in extra):
        data.setdefault("environment", {})["extra_packages"] = [*extra, "liger-kernel"]
    return Preset.model_validate(data)
