"""The planner's shared result types (an estimate, a change, a tune result) and the one
function that makes an estimate. A leaf of the planner: tune, the method search, the method
estimates and the probe all read these, so none of them needs another's module."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.planner.gpu import GpuSpec
from backend.planner.memory import HOST_MARGIN, MemoryPlan, plan_memory
from backend.planner.realdata import LengthDist
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape
from backend.planner.throughput import ThroughputPlan, predict_throughput

# Keep the user's configuration unless the best one is predicted this much faster.
MIN_GAIN = 0.02
# Compile (flex_attention's kernels, torch.compile) allowed before the first step, seconds.
COMPILE_BUDGET_S = 240.0


@dataclass
class Estimate:
    settings: TrainSettings
    memory: MemoryPlan
    throughput: ThroughputPlan
    host_ram: int | None = None  # bytes of host RAM the plan is held to (None: unknown)
    base: Estimate | None = None  # the uncalibrated estimate when a machine correction applied
    method: str = "full"  # MethodSettings.kind(): which probe rows may correct it

    @property
    def uncalibrated(self) -> Estimate:
        return self.base or self

    @property
    def fits_host(self) -> bool:
        return self.host_ram is None or self.memory.host_ram_peak <= (1 - HOST_MARGIN) * (
            self.host_ram
        )


@dataclass
class Change:
    path: str
    old: Any
    new: Any
    reason: str


@dataclass
class TuneResult:
    preset: Any  # backend.preset.schema.Preset (Any keeps this module free of the schema import)
    changes: list[Change]
    before: Estimate
    after: Estimate
    candidates: int = 0
    notes: list[str] = field(default_factory=list)

    ranked: list[Estimate] = field(default_factory=list)  # fitting candidates, best first
    probe_pool: list[Estimate] = field(default_factory=list)  # + tight ones (a probe measures)
    dropped: list[tuple[Estimate, str]] = field(default_factory=list)  # (candidate, why)
    batch: str = ""  # the global-batch change in real tokens per optimizer step
    calibrated: int = 0  # probe rows of this GPU kind that corrected the predictions
    methods: list[Any] = field(default_factory=list)  # LoRA/QLoRA/ZeRO (method_search.py)

    @property
    def speedup(self) -> float:
        """Gain in REAL tokens/s (the data's tokens; padding does not count)."""
        base = self.before.throughput.real_tokens_per_s
        return self.after.throughput.real_tokens_per_s / base if base else 0.0


def estimate(
    shape: ModelShape,
    settings: TrainSettings,
    gpu: GpuSpec,
    dist: LengthDist | None = None,
    host_ram: int | None = None,
    calibration: list[dict[str, Any]] | None = None,
) -> Estimate:
    """The base model's estimate, corrected by this GPU kind's probe rows when given."""
    est = Estimate(
        settings,
        plan_memory(shape, settings, gpu),
        predict_throughput(shape, settings, gpu, dist),
        host_ram,
    )
    if calibration:
        from backend.planner.learned import (  # deferred: calibration rows, only when estimating
            adjust,
        )

        est = adjust(est, shape, calibration)
    return est
