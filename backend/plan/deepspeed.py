"""The DeepSpeed ZeRO config a preset's ``training.zero`` asks for, written into the run dir.

FastChat ships hand-written configs (``playground/deepspeed_config_s2.json``, ``_s3.json``); the
generated one is the same shape with every size left to the Trainer (``"auto"``), so batch size,
accumulation, clipping and precision stay the preset's own flags and cannot disagree with the
config. The plan shows it; the launcher writes it as ``<run_dir>/deepspeed.json`` and the entry
gets ``--deepspeed <that path>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.preset.schema import Preset, TrainingArgs, ZeroSettings

CONFIG_NAME = "deepspeed.json"


def zero_config(zero: ZeroSettings, training: TrainingArgs) -> dict[str, Any]:
    """The ZeRO JSON (a dict) for ``zero``; precision follows the preset's bf16/fp16 flags."""
    section: dict[str, Any] = {
        "stage": zero.stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": "auto",
    }
    if zero.offload_optimizer:
        section["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if zero.stage == 3:
        section.update(
            {
                "stage3_prefetch_bucket_size": "auto",
                "stage3_param_persistence_threshold": "auto",
                "stage3_max_live_parameters": 1e9,
                "stage3_max_reuse_distance": 1e9,
                # save_model writes one consolidated 16-bit state dict (FastChat's s3 config)
                "stage3_gather_16bit_weights_on_model_save": True,
            }
        )
        if zero.offload_param:
            section["offload_param"] = {"device": "cpu", "pin_memory": True}
    config: dict[str, Any] = {
        "zero_optimization": section,
        "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
        "steps_per_print": 2000,
        "wall_clock_breakdown": False,
    }
    if zero.offload_optimizer:
        # DeepSpeed refuses a client (torch) optimizer with ZeRO-Offload
        # (zero_force_ds_cpu_optimizer); named here it builds its CPU Adam, and the Trainer fills
        # the "auto" hyper-parameters from the preset's flags and keeps its own LR schedule.
        config["optimizer"] = {
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
        }
    if training.bf16:
        config["bf16"] = {"enabled": "auto"}
    if training.fp16:
        config["fp16"] = {"enabled": "auto", "loss_scale": 0, "initial_scale_power": 16}
    return config


def config_path(run_dir: Path | None) -> str:
    """Where the config lives for the training process (``<run_dir>`` before a launch)."""
    return str((run_dir if run_dir is not None else Path("<run_dir>")) / CONFIG_NAME)


def config_text(preset: Preset) -> str | None:
    """The config file's text, or None when the preset does not use ZeRO."""
    zero = preset.training.zero
    if zero is None:
        return None
    return json.dumps(zero_config(zero, preset.training), indent=2) + "\n"


def write_config(preset: Preset, run_dir: Path) -> Path | None:
    """Write ``run_dir/deepspeed.json`` when the preset uses ZeRO (called by the launcher)."""
    text = config_text(preset)
    if text is None:
        return None
    path = run_dir / CONFIG_NAME
    path.write_text(text, encoding="utf-8")
    return path
