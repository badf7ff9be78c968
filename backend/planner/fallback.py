"""OOM fallback candidates: what a launch falls back to when its first steps run out of memory.

tune prefers a tight no-offload fit over offload when the planner is within its stated error
(docs/performance.md); the price is that a prediction a few percent low OOMs. So the launch
records, next to the configuration it starts with, the configurations tune ranks after it that
are predicted to need less memory, and the watcher restarts on the next one when an attempt runs
out of memory in its first steps (``backend.runs.fallback``).

The ranking is tune's own (``tune.tune(...).ranked``: configurations predicted to fit the GPU
and the host's RAM, most real tokens/s first); this module only walks it: candidate 1 is the
launched preset, then up to ``MAX_FALLBACKS`` ranked configurations, each predicted to need
at least ``FIT_MARGIN`` (5 %) less GPU memory per GPU than the one before it (a smaller saving is
inside the planner's error and would likely run out again) and differing from the launch only in
memory knobs (``memory_knobs_only``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from backend import units
from backend.planner import gpu as planner_gpu
from backend.planner.gpu import GpuSpec, gpu_spec
from backend.planner.hostram import read_meminfo
from backend.planner.memory import FIT_MARGIN
from backend.planner.settings import TrainSettings
from backend.planner.shape import shape_for_preset
from backend.planner.tune import _apply, tune

MAX_FALLBACKS = 3
# Plan the chain for this GPU instead of the one NVML finds: a CPU-only machine (tests, a
# launcher host without GPUs) has none, and tune needs one to rank candidates.
GPU_ENV = "TRAINWIZ_FALLBACK_GPU"


@dataclass
class Candidate:
    """One configuration of the chain; ``overrides`` are dotted preset paths relative to the
    launched preset (empty for candidate 1)."""

    number: int
    label: str
    words: str
    overrides: dict[str, Any]
    predicted_gpu_gib: float
    predicted_host_gib: float
    preset: Any = field(default=None, repr=False)  # backend.preset.schema.Preset

    def record(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "label": self.label,
            "words": self.words,
            "overrides": self.overrides,
            "predicted_gpu_gib": self.predicted_gpu_gib,
            "predicted_host_gib": self.predicted_host_gib,
        }


def describe(s: TrainSettings) -> str:
    """'b4 no-recompute', 'b2 ga2 + recompute + offload': what a user tells configurations by."""
    parts = [f"b{s.micro_batch}" + (f" ga{s.grad_accum}" if s.grad_accum > 1 else "")]
    if s.trainer_gc or s.fsdp_ac:
        parts.append("+ recompute")
    elif s.recompute_layers:
        parts.append(f"+ recompute of {s.recompute_layers} layers")
    else:
        parts.append("no-recompute")
    if s.offload:
        parts.append("+ offload")
    if s.packing:
        parts.append(f"packed {s.row}")
    return " ".join(parts)


def preset_overrides(before: Any, after: Any) -> dict[str, Any]:
    """Dotted ``section.field`` paths whose values differ between two presets (JSON values)."""
    old = before.model_dump(mode="json")
    new = after.model_dump(mode="json")
    out: dict[str, Any] = {}
    for section, fields in new.items():
        if not isinstance(fields, dict):
            continue
        for name, value in fields.items():
            if old.get(section, {}).get(name) != value:
                out[f"{section}.{name}"] = value
    return out


def memory_knobs_only(launched: TrainSettings, other: TrainSettings) -> bool:
    """True when ``other`` differs from ``launched`` only in what trades speed for memory and
    needs nothing new installed: micro-batch/accumulation, recompute, CPU offload, the packed
    row budget. A fallback never switches packing, kernels, optimizer or attention on a run
    whose environment was built for the launched preset."""
    keep = {
        "micro_batch": launched.micro_batch,
        "grad_accum": launched.grad_accum,
        "trainer_gc": launched.trainer_gc,
        "fsdp_ac": launched.fsdp_ac,
        "recompute_layers": launched.recompute_layers,
        "pack_tokens": launched.pack_tokens,
    }
    same_rest = other.with_(**keep)
    strip = [t for t in other.fsdp_tokens if t != "offload"]
    return same_rest.with_(fsdp=" ".join(strip)) == launched.with_(
        fsdp=" ".join(t for t in launched.fsdp_tokens if t != "offload")
    )


def _same(a: TrainSettings, b: TrainSettings) -> bool:
    return describe(a) == describe(b) and a.label() == b.label()


def chain_from_ranked(preset: Any, ranked: list[Any], before: Any) -> list[Candidate]:
    """Candidate 1 = the launched preset (``before``: its Estimate), then the ranked estimates
    after it (all of them when it is not among them), each needing less GPU memory than the
    last one taken, at most ``MAX_FALLBACKS``."""
    first = Candidate(
        1,
        before.settings.label(),
        describe(before.settings),
        {},
        units.gib(before.memory.total_per_gpu, 3),
        units.gib(before.memory.host_ram_peak, 3),
        preset,
    )
    at = next((i for i, e in enumerate(ranked) if _same(e.settings, before.settings)), -1)
    out = [first]
    last = before.memory.total_per_gpu
    for est in ranked[at + 1 :]:
        if len(out) > MAX_FALLBACKS:
            break
        smaller = est.memory.total_per_gpu <= (1 - FIT_MARGIN) * last
        if not smaller or not memory_knobs_only(before.settings, est.settings):
            continue
        candidate = _apply(preset, est.settings)
        overrides = preset_overrides(preset, candidate)
        if not overrides:
            continue
        out.append(
            Candidate(
                len(out) + 1,
                est.settings.label(),
                describe(est.settings),
                overrides,
                units.gib(est.memory.total_per_gpu, 3),
                units.gib(est.memory.host_ram_peak, 3),
                candidate,
            )
        )
        last = est.memory.total_per_gpu
    return out


def fallback_chain(preset: Any) -> tuple[list[Candidate], str]:
    """(chain, why-empty) for a preset about to launch: tune's ranking for this machine's GPU
    (or ``$TRAINWIZ_FALLBACK_GPU``) and host RAM. An empty chain says why in the second item."""
    if not preset.launch.oom_fallback:
        return [], "off (launch.oom_fallback: false)"
    if preset.launch.scheduler != "local" or preset.launch.nnodes > 1:
        return [], "not for multi-node runs"
    if preset.training.method != "full" or preset.training.zero is not None:
        return [], f"not for {preset.training.method}/ZeRO runs (tune ranks full FSDP/DDP runs)"
    named = os.environ.get(GPU_ENV, "").strip()
    gpu: GpuSpec | None
    if named:
        gpu = gpu_spec(named, count=preset.launch.nproc_per_node)
    elif preset.launch.device == "cpu":
        return [], "the run trains on the CPU: no GPU plan to rank candidates by"
    else:
        gpu = planner_gpu.detect_local()  # via the module: a stand-in detector reaches it
        if gpu is None:
            return [], "no GPU found here to plan for"
    shape = shape_for_preset(preset)
    if shape is None:
        return [], "the model's shape is unknown before it is downloaded"
    result = tune(preset, gpu, shape, host_ram=read_meminfo())
    chain = chain_from_ranked(preset, result.ranked, result.before)
    if len(chain) == 1:
        return [], "no ranked configuration needs less memory than this one"
    return chain, ""
