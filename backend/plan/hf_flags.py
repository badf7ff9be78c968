"""Training flags named for the transformers version that will parse them.

transformers renamed and removed arguments over FastChat's life (shared notes, fastchat.md):
``evaluation_strategy`` became ``eval_strategy`` in 4.41 (the old name is rejected from 4.51),
and ``fsdp_transformer_layer_cls_to_wrap`` moved into ``fsdp_config`` in 5.0. A preset keeps one
spelling; the plan writes the one its target version accepts.
"""

from __future__ import annotations

import json
import re
from typing import Any

from backend.preset.schema import TrainingArgs

# Fields rendered even when the preset leaves them at their default: FastChat needs them.
_ALWAYS = ("data_path", "output_dir")
# The entry's own options; FastChat's train_mem.py would reject them.
_ENTRY_ONLY = (
    "attn_implementation", "packing", "pack_tokens", "save_minutes", "eval_split",
    "compile_layers", "recompute_layers", "chat_template",
)  # fmt: skip
# Preset-only fields turned into other flags: method/lora -> FastChat's train_lora flags,
# zero -> --deepspeed <generated config> (docs/lora.md).
_RENDERED_ELSEWHERE = ("method", "lora", "zero")
# Always written for a LoRA run (FastChat's README command does); the rest when set.
_LORA_ALWAYS = ("lora_r", "lora_alpha", "lora_dropout")


def version_tuple(version: str) -> tuple[int, int, int]:
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]]
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def format_value(value: Any) -> str:
    """Render as FastChat's command lines do: True/False, 2e-05, 1500 (not 1500.0)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def flag_name(field: str, target: tuple[int, int, int]) -> str:
    if field == "eval_strategy" and target < (4, 41, 0):
        return "evaluation_strategy"
    return field


def training_flags(
    args: TrainingArgs,
    *,
    model_path: str,
    target_transformers: str,
    trainwiz_entry: bool,
    deepspeed_config: str = "<run_dir>/deepspeed.json",
) -> list[str]:
    """``--flag value`` pairs for every field the preset sets, in the schema's (seed's) order."""
    target = version_tuple(target_transformers)
    chosen = set(args.model_fields_set) | set(_ALWAYS)
    values: dict[str, Any] = {name: getattr(args, name) for name in TrainingArgs.model_fields}
    values["model_name_or_path"] = model_path
    chosen.add("model_name_or_path")
    fsdp_config = dict(values["fsdp_config"] or {})
    if target >= (5, 0, 0) and values["fsdp_transformer_layer_cls_to_wrap"]:
        # 5.0 removed the flag; the same wrapping is expressed in fsdp_config.
        fsdp_config.setdefault(
            "transformer_layer_cls_to_wrap", [values["fsdp_transformer_layer_cls_to_wrap"]]
        )
        chosen.discard("fsdp_transformer_layer_cls_to_wrap")
        chosen.add("fsdp_config")
    values["fsdp_config"] = fsdp_config or None
    argv: list[str] = []
    for name in TrainingArgs.model_fields:
        if name not in chosen:
            continue
        if name in _ENTRY_ONLY and not trainwiz_entry:
            continue
        if name in _RENDERED_ELSEWHERE:
            continue
        value = values[name]
        if value is None:
            continue
        argv += [f"--{flag_name(name, target)}", format_value(value)]
    argv += lora_flags(args)
    if args.zero is not None:
        argv += ["--deepspeed", deepspeed_config]
    return argv


def lora_flags(args: TrainingArgs) -> list[str]:
    """FastChat's train_lora.py flags: ``--lora_target_modules a b`` (a list), ``--q_lora``."""
    if args.method == "full":
        return []
    lora = args.lora
    chosen = set(lora.model_fields_set) | set(_LORA_ALWAYS)
    argv: list[str] = []
    for name in type(lora).model_fields:
        if name not in chosen:
            continue
        value = getattr(lora, name)
        if isinstance(value, list):
            argv += [f"--{name}", *value]
        else:
            argv += [f"--{name}", format_value(value)]
    if args.method == "qlora":
        argv += ["--q_lora", "True"]
    return argv
