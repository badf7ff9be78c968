"""Memory and throughput planning: will this configuration fit, how fast, and what is fastest.

No UI and no torch here: the planner is arithmetic over the model's config and the preset, with
constants calibrated on real runs (docs/planner.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend.errors import BadInput
from backend.i18n import _
from backend.planner.derived import Derived, count_records, derive
from backend.planner.gpu import GIB, GpuSpec, gpu_spec
from backend.planner.memory import MemoryPlan, plan_memory
from backend.planner.methods import estimate_preset
from backend.planner.settings import TrainSettings, settings_from_preset
from backend.planner.shape import ModelShape, shape_for_preset, shape_from_config, shape_from_dir
from backend.planner.throughput import ThroughputPlan, predict_throughput
from backend.planner.tune import Change, Estimate, TuneResult, estimate, tune

__all__ = [
    "GIB",
    "Change",
    "Derived",
    "Estimate",
    "GpuSpec",
    "MemoryPlan",
    "ModelShape",
    "PresetPlan",
    "ThroughputPlan",
    "TrainSettings",
    "TuneResult",
    "count_records",
    "derive",
    "estimate",
    "gpu_spec",
    "plan_memory",
    "plan_preset",
    "predict_throughput",
    "settings_from_preset",
    "shape_for_preset",
    "shape_from_config",
    "shape_from_dir",
    "tune",
]


@dataclass
class PresetPlan:
    shape: ModelShape
    gpu: GpuSpec
    estimate: Estimate


def plan_preset(preset: Any, gpu: GpuSpec, shape: ModelShape | None = None) -> PresetPlan:
    """Memory and throughput for a preset on ``gpu``; BadInput when the shape is unknown."""
    shape = shape or shape_for_preset(preset)
    if shape is None:
        raise BadInput(
            _(
                "model.dir {dir}: no config.json to read the model's shape from; download the "
                "model first (trainwiz model) or pass --config PATH/config.json"
            ).format(dir=preset.model.dir)
        )
    return PresetPlan(shape=shape, gpu=gpu, estimate=estimate_preset(shape, preset, gpu))
