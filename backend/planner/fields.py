"""The hyperparameter form's model: every training argument, its group, help, parsing and checks.

Kept out of the screen so that parsing and every validation message are plain functions with
unit tests; the screen only draws what these return. Types and ranges come from the preset's
pydantic schema itself (a value is accepted only if assigning it to the schema model succeeds),
so the form can never accept what a preset file would reject.
"""

from __future__ import annotations

import json
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import ValidationError

from backend.errors import BadInput
from backend.i18n import N_, _
from backend.plan.chat_template import template_choice
from backend.planner.gpu import GpuSpec
from backend.planner.shape import ModelShape
from backend.preset.schema import LaunchConfig, Preset, TrainingArgs

Level = Literal["error", "warning", "info"]

GROUPS: list[tuple[str, list[str]]] = [
    ("Model and data", ["model_name_or_path", "data_path", "chat_template", "eval_data_path",
                        "eval_split", "output_dir",
                        "cache_dir", "lazy_preprocess", "padding_side", "trust_remote_code"]),
    ("Batch and length", ["per_device_train_batch_size", "gradient_accumulation_steps",
                          "per_device_eval_batch_size", "model_max_length", "num_train_epochs",
                          "max_steps", "packing", "pack_tokens"]),
    ("Optimizer and schedule", ["learning_rate", "lr_scheduler_type", "warmup_ratio",
                                "warmup_steps", "weight_decay", "optim", "adam_beta1",
                                "adam_beta2", "adam_epsilon", "max_grad_norm", "seed"]),
    ("Precision", ["bf16", "fp16", "tf32", "attn_implementation", "use_liger_kernel",
                   "torch_compile", "compile_layers"]),
    ("Parallelism and FSDP", ["launch.nproc_per_node", "fsdp",
                              "fsdp_transformer_layer_cls_to_wrap", "fsdp_config", "deepspeed",
                              "ddp_timeout", "method", "lora", "zero"]),
    ("Checkpointing, eval and logging", ["gradient_checkpointing", "recompute_layers",
                                         "eval_strategy",
                                         "eval_steps", "save_strategy", "save_steps",
                                         "save_minutes", "save_total_limit", "logging_steps",
                                         "logging_first_step", "report_to",
                                         "dataloader_num_workers", "disable_tqdm"]),
]  # fmt: skip

# Help for every field of the form, marked for the catalog (the screen shows ``_(help)``); a
# field not named here falls back to its schema description, shown in English.
HELP: dict[str, str] = {
    "model_name_or_path": N_("as the trainer sees it; None: model.dir (mapped through volumes)"),
    "chat_template": N_(
        "auto: the tokenizer's own chat template, else FastChat's (vicuna for Llama)"
    ),
    "eval_split": N_("hold out this fraction of data_path for eval loss (deterministic by seed)"),
    "save_minutes": N_("also checkpoint when this many minutes passed since the last one"),
    "data_path": N_("FastChat conversation JSON for training (list of {id, conversations})"),
    "eval_data_path": N_("conversations for evaluation; needed by any eval_strategy but 'no'"),
    "output_dir": N_("where checkpoints and the final model are written"),
    "cache_dir": N_("Hugging Face cache for downloads (None: the default cache)"),
    "lazy_preprocess": N_("tokenize each sample when it is used instead of all at start"),
    "padding_side": N_("FastChat pads every sample to model_max_length on this side"),
    "trust_remote_code": N_("run Python code shipped with the model repo (only for trusted repos)"),
    "per_device_train_batch_size": N_("samples per GPU per forward pass (the micro-batch)"),
    "gradient_accumulation_steps": N_("micro-batches summed before each optimizer step"),
    "per_device_eval_batch_size": N_("samples per GPU per evaluation forward pass"),
    "model_max_length": N_("tokens per sample; FastChat pads or truncates every sample to it"),
    "num_train_epochs": N_("passes over the training data (ignored when max_steps > 0)"),
    "max_steps": N_("stop after this many optimizer steps (-1: use num_train_epochs)"),
    "learning_rate": N_("peak learning rate after warmup (Vicuna used 2e-5)"),
    "lr_scheduler_type": N_("cosine, linear, constant, constant_with_warmup, ..."),
    "warmup_ratio": N_("fraction of total steps spent warming up (0-1)"),
    "warmup_steps": N_("warmup in steps; wins over warmup_ratio when > 0"),
    "weight_decay": N_("AdamW decoupled weight decay"),
    "optim": N_("optimizer name as HF knows it (adamw_torch, adamw_torch_fused, ...)"),
    "adam_beta1": N_("AdamW beta1"),
    "adam_beta2": N_("AdamW beta2"),
    "adam_epsilon": N_("AdamW epsilon"),
    "max_grad_norm": N_("gradient clipping norm (0: off)"),
    "seed": N_("random seed for data order and initialisation"),
    "bf16": N_("bfloat16 mixed precision (needs compute capability 8.0+, e.g. A100/H100)"),
    "fp16": N_("float16 mixed precision with loss scaling (pre-Ampere GPUs)"),
    "tf32": N_("TF32 matmuls for fp32 work (needs compute capability 8.0+)"),
    "attn_implementation": N_("auto: flash-attn 2 when importable on sm80+, else SDPA"),
    "launch.nproc_per_node": N_("training processes = GPUs used on this node"),
    "fsdp": N_(
        "HF --fsdp: 'full_shard auto_wrap' shards states over GPUs; 'offload' moves them to RAM"
    ),
    "fsdp_transformer_layer_cls_to_wrap": N_(
        "the layer class FSDP wraps as a unit (LlamaDecoderLayer)"
    ),
    "fsdp_config": N_('JSON, e.g. {"activation_checkpointing": true}'),
    "deepspeed": N_("path to a DeepSpeed config (instead of FSDP)"),
    "ddp_timeout": N_("seconds before a stuck collective fails"),
    "method": N_("full: train every weight; lora: adapters on a frozen bf16 base; qlora: on 4-bit"),
    "lora": N_('JSON, e.g. {"lora_r": 8, "lora_alpha": 16, "lora_target_modules": ["q_proj"]}'),
    "zero": N_('DeepSpeed ZeRO instead of FSDP, JSON: {"stage": 3, "offload_optimizer": true}'),
    "gradient_checkpointing": N_("recompute activations in backward: less memory, more compute"),
    "eval_strategy": N_("when to evaluate: no, steps (every eval_steps) or epoch"),
    "eval_steps": N_("evaluate every N steps (or a fraction of total steps when < 1)"),
    "save_strategy": N_("when to write checkpoints: no, steps, epoch or best"),
    "save_steps": N_("checkpoint every N steps (or a fraction when < 1)"),
    "save_total_limit": N_("keep only the newest N checkpoints (None: keep all)"),
    "logging_steps": N_("log loss every N steps"),
    "logging_first_step": N_("also log the very first step"),
    "report_to": N_("none, tensorboard, wandb, ... (None: every installed integration)"),
    "dataloader_num_workers": N_("data loader worker processes (0: in the training process)"),
    "disable_tqdm": N_("hide the progress bar in the log"),
    "packing": N_("pack whole conversations into rows (no padding): real tokens/s up to 2x+"),
    "pack_tokens": N_("tokens per packed row (>= model_max_length; None: model_max_length)"),
    "use_liger_kernel": N_(
        "Liger kernels: less memory (no full logits), faster; needs liger-kernel"
    ),
    "torch_compile": N_("torch.compile the model: minutes of startup, faster steps where it pays"),
    "compile_layers": N_(
        "torch.compile each decoder layer (one graph for all): shorter startup than torch_compile"
    ),
    "recompute_layers": N_(
        "recompute only this many decoder layers (spread evenly): less memory than none, "
        "less compute than gradient_checkpointing"
    ),
}

Kind = Literal["bool", "optional_bool", "int", "optional_int", "float", "optional_float",
               "str", "optional_str", "choice", "json"]  # fmt: skip


@dataclass(frozen=True)
class FieldInfo:
    path: str  # "per_device_train_batch_size" (training) or "launch.nproc_per_node"
    group: str
    kind: Kind
    choices: tuple[str, ...]
    help: str

    @property
    def name(self) -> str:
        return self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Issue:
    path: str
    level: Level
    message: str


def _kind(annotation: Any) -> tuple[Kind, tuple[str, ...]]:
    origin = get_origin(annotation)
    args = [a for a in get_args(annotation) if a is not type(None)]
    optional = origin in (typing.Union, types.UnionType) and type(None) in get_args(annotation)
    if optional and len(args) == 1:
        inner, _ = _kind(args[0])
        return typing.cast(Kind, f"optional_{inner}") if inner in (
            "bool",
            "int",
            "float",
            "str",
        ) else inner, ()
    if origin is Literal:
        return "choice", tuple(str(a) for a in get_args(annotation))
    if annotation is bool:
        return "bool", ()
    if annotation is int:
        return "int", ()
    if annotation is float:
        return "float", ()
    if annotation is str:
        return "str", ()
    return "json", ()


def form_fields() -> list[FieldInfo]:
    """Every field of the form, grouped, with its kind and help (schema description first)."""
    out = []
    for group, paths in GROUPS:
        for path in paths:
            model = LaunchConfig if path.startswith("launch.") else TrainingArgs
            field = model.model_fields[path.rsplit(".", 1)[-1]]
            kind, choices = _kind(field.annotation)
            help_text = HELP.get(path) or field.description or ""
            out.append(FieldInfo(path, group, kind, choices, help_text))
    return out


def current_value(preset: Preset, path: str) -> Any:
    if path.startswith("launch."):
        return getattr(preset.launch, path.split(".", 1)[1])
    return getattr(preset.training, path)


def display_value(value: Any) -> str:
    if value is None:
        return ""
    if hasattr(value, "model_dump"):  # a nested block (training.lora, training.zero)
        value = value.model_dump()
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


def parse(info: FieldInfo, raw: Any) -> Any:
    """Text (or a switch's bool) to a Python value; ValueError says what was expected."""
    if info.kind == "bool":
        return bool(raw)
    text = str(raw).strip()
    if info.kind.startswith("optional_") and text == "":
        return None
    base = info.kind.removeprefix("optional_")
    if base == "bool":
        if text.lower() not in ("true", "false"):
            raise ValueError(_("expected true, false or empty"))
        return text.lower() == "true"
    if base == "int":
        try:
            return int(text)
        except ValueError:
            raise ValueError(_("'{text}' is not a whole number").format(text=text)) from None
    if base == "float":
        try:
            return float(text)
        except ValueError:
            raise ValueError(_("'{text}' is not a number (e.g. 2e-5)").format(text=text)) from None
    if info.kind == "json":
        if text == "":
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(_("not valid JSON ({error})").format(error=exc.msg)) from None
    return text


def apply(preset: Preset, info: FieldInfo, raw: Any) -> tuple[Preset | None, str]:
    """(new preset, "") when the schema accepts the value, else (None, message)."""
    try:
        value = parse(info, raw)
    except ValueError as exc:
        return None, str(exc)
    updated = preset.model_copy(deep=True)
    target = updated.launch if info.path.startswith("launch.") else updated.training
    try:
        setattr(target, info.name, value)
    except ValidationError as exc:
        err = exc.errors()[0]
        return None, str(err["msg"]).removeprefix("Value error, ")
    return updated, ""


def _template_issue(preset: Preset) -> Issue:
    """The form says which template trains and why (the same decision the entry makes)."""
    try:
        choice = template_choice(preset)
    except BadInput as exc:
        return Issue("chat_template", "error", str(exc))
    return Issue(
        "chat_template",
        "info",
        _("trains with {template}: {reason}").format(
            template=choice.template, reason=choice.reason
        ),
    )


def cross_checks(
    preset: Preset, gpu: GpuSpec | None, shape: ModelShape | None, visible_gpus: int | None
) -> list[Issue]:
    """Rules that span fields or need the machine: sm80 features, eval data, RoPE, GPU count."""
    tr, launch = preset.training, preset.launch
    issues: list[Issue] = []
    cuda = launch.device == "cuda"
    if not cuda:
        for path in ("bf16", "tf32"):
            if getattr(tr, path):
                issues.append(Issue(path, "error", _("launch.device is cpu: turn this off")))
    elif gpu is not None and not gpu.bf16_ok:
        sm = f"sm{gpu.cc[0]}{gpu.cc[1]}"
        for path in ("bf16", "tf32"):
            if getattr(tr, path):
                issues.append(
                    Issue(
                        path,
                        "error",
                        _("needs compute capability 8.0+; {gpu} is {sm}").format(
                            gpu=gpu.name, sm=sm
                        ),
                    )
                )
        if tr.attn_implementation == "flash_attention_2":
            issues.append(
                Issue(
                    "attn_implementation",
                    "error",
                    _("flash-attn 2 needs sm80+; {gpu} is {sm}").format(gpu=gpu.name, sm=sm),
                )
            )
    elif gpu is None and (tr.bf16 or tr.tf32):
        issues.append(Issue("bf16", "info", _("GPU unknown here: sm80+ requirement not checked")))
    if gpu is not None and gpu.bf16_ok and tr.fp16:
        issues.append(
            Issue("fp16", "info", _("this GPU supports bf16, which needs no loss scaling"))
        )
    if tr.eval_strategy != "no" and not tr.eval_data_path:
        # The trainwiz entry's schema refuses it; FastChat's own script fails at the first eval.
        level: Level = "error" if launch.entry == "trainwiz" else "warning"
        issues.append(
            Issue("eval_strategy", level, _("needs eval data: set eval_data_path or choose 'no'"))
        )
    issues.append(_template_issue(preset))
    if tr.eval_data_path and tr.eval_strategy == "no":
        issues.append(Issue("eval_data_path", "info", _("unused while eval_strategy is 'no'")))
    if shape is not None and tr.model_max_length > shape.max_positions:
        factor = math.ceil(tr.model_max_length / shape.max_positions)
        how = (
            _("the trainwiz entry applies linear RoPE scaling x{factor}").format(factor=factor)
            if launch.entry == "trainwiz"
            else _("FastChat's train_mem.py does NOT scale RoPE: quality will suffer")
        )
        issues.append(
            Issue(
                "model_max_length",
                "warning",
                _("beyond the model's {positions} positions: RoPE scaling needed; {how}").format(
                    positions=shape.max_positions, how=how
                ),
            )
        )
    if cuda and visible_gpus is not None and launch.nproc_per_node > visible_gpus:
        issues.append(
            Issue(
                "launch.nproc_per_node",
                "error",
                _("{nproc} processes but {count} GPU(s) visible").format(
                    nproc=launch.nproc_per_node, count=visible_gpus
                ),
            )
        )
    fsdp_ac = bool((tr.fsdp_config or {}).get("activation_checkpointing"))
    if fsdp_ac and tr.gradient_checkpointing:
        issues.append(
            Issue(
                "gradient_checkpointing",
                "error",
                _("fsdp_config activation_checkpointing is on: HF refuses both; turn this off"),
            )
        )
    if tr.fsdp and tr.deepspeed:
        issues.append(Issue("deepspeed", "error", _("choose FSDP or DeepSpeed, not both")))
    if tr.fsdp and launch.nproc_per_node * launch.nnodes == 1:
        issues.append(Issue("fsdp", "info", _("one GPU: FSDP runs NO_SHARD (states not divided)")))
    return issues
