"""The planner's verdict gates a launch: a preset predicted not to fit this machine's GPU memory
or host RAM is refused before anything starts, with tune's answer as the fix.

Why: ``trainwiz plan`` said DOES NOT FIT while ``trainwiz launch`` started the run anyway; it ran
out of GPU memory in step 1 and its record said only "exit code 1". The verdict is the one the
plan prints (``backend.planner.report.plan_estimate``), judged only where it is knowable: a CUDA
run on this machine alone (one node, the local scheduler), a GPU detected here and the model's
shape known. Everywhere else (CPU, multi-node, Slurm, a model neither downloaded nor a known
repo) there is no gate: a guess must not refuse a run.

The user may know better than the planner (its stated error is ~10 %): ``--ignore-plan`` (the
wizard: "Launch anyway") skips the gate. The OOM fallback never meets it: the watcher restarts
on candidates tune judged at launch, from their recorded specs (``backend.runs.fallback``),
without a new launch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend import units
from backend.errors import BadInput
from backend.i18n import _
from backend.planner import gpu as planner_gpu
from backend.planner import hostram
from backend.planner.estimate import Estimate
from backend.planner.gpu import GpuSpec
from backend.planner.memory import HOST_MARGIN
from backend.planner.shape import ModelShape, shape_for_preset

# What the planner raises on a preset or config.json it cannot model: no verdict, so no gate.
UNKNOWABLE = (BadInput, ValueError, KeyError, TypeError, ArithmeticError)


@dataclass
class PlanVerdict:
    """The plan's verdict for a preset on this machine, with the numbers that decide it."""

    gpu: GpuSpec
    shape: ModelShape
    estimate: Estimate
    host_ram: int | None  # this machine's RAM in bytes (None: unknown, not judged)
    fix: str = ""  # tune's answer, in words (only when it does not fit)

    @property
    def fits_gpu(self) -> bool:
        return self.estimate.memory.fits

    @property
    def fits_host(self) -> bool:
        return self.estimate.fits_host

    @property
    def fits(self) -> bool:
        return self.fits_gpu and self.fits_host

    def numbers(self) -> str:
        """What does not fit, as the plan says it (or that it fits): one sentence."""
        mem = self.estimate.memory
        parts = []
        if not self.fits_gpu:
            parts.append(
                _("predicted peak {need} GiB per GPU, the {gpu} here has {have} GiB").format(
                    need=units.gib(mem.total_per_gpu, 1),
                    gpu=self.gpu.name,
                    have=units.gib(self.gpu.memory_bytes, 1),
                )
            )
        if not self.fits_host and self.host_ram is not None:
            parts.append(
                _(
                    "predicted host RAM peak {need} GiB, this machine has {have} GiB (the plan "
                    "keeps {margin} free)"
                ).format(
                    need=units.gib(mem.host_ram_peak, 1),
                    have=units.gib(self.host_ram, 1),
                    margin=f"{HOST_MARGIN:.0%}",
                )
            )
        if not parts:
            return _("FITS: predicted peak {need} of {have} GiB per GPU ({gpu})").format(
                need=units.gib(mem.total_per_gpu, 1),
                have=units.gib(self.gpu.memory_bytes, 1),
                gpu=self.gpu.name,
            )
        return _("DOES NOT FIT: {what}").format(what="; ".join(parts))

    def refusal(self, name: str, ref: str | None = None) -> str:
        """The CLI's one line: the numbers, tune's fix, the override."""
        return _(
            "plan: {name} {numbers}. 'trainwiz tune {ref}' {fix}. To launch it anyway (it will "
            "likely run out of memory), pass --ignore-plan"
        ).format(name=name, numbers=self.numbers(), ref=ref or name, fix=self.fix)


def plan_verdict(preset: Any, *, with_fix: bool = True) -> PlanVerdict | None:
    """The verdict for ``preset`` on this machine; None where it is not knowable (module
    docstring). ``with_fix``: run tune for the fix when it does not fit."""
    launch = preset.launch
    if launch.device != "cuda" or launch.scheduler != "local" or launch.nnodes != 1:
        return None
    gpu = planner_gpu.detect_local()  # via the module: a stand-in detector reaches it
    if gpu is None:
        return None
    host_ram = hostram.read_meminfo()  # via the module, as the detector
    return verdict_on(preset, gpu, host_ram, with_fix=with_fix)


def verdict_on(
    preset: Any, gpu: GpuSpec, host_ram: int | None, *, with_fix: bool = True
) -> PlanVerdict | None:
    """``plan_verdict`` for a machine already read (its GPU and RAM): variants of one preset
    are judged without reading NVML and /proc/meminfo again for each."""
    from backend.planner.report import (  # deferred: the planner's tables, only for CUDA runs
        plan_estimate,
    )

    try:
        shape = shape_for_preset(preset)
        if shape is None:
            return None
        est = plan_estimate(preset, gpu, shape, host_ram=host_ram)
    except UNKNOWABLE:
        return None
    verdict = PlanVerdict(gpu, shape, est, host_ram)
    if with_fix and not verdict.fits:
        verdict.fix = tune_fix(preset, gpu, shape, host_ram)
    return verdict


def tune_fix(preset: Any, gpu: GpuSpec, shape: ModelShape, host_ram: int | None) -> str:
    """What ``trainwiz tune`` writes for this preset and GPU, in words (the end of a sentence
    that starts with the command)."""
    from backend.planner.tune import tune  # deferred: the candidate search, only when refused

    try:
        result = tune(preset, gpu, shape, host_ram=host_ram)
    except UNKNOWABLE as exc:
        return _("cannot search for a configuration that fits ({error})").format(error=exc)
    after = result.after
    if not (after.memory.fits and after.fits_host and result.changes):
        return _(
            "finds no configuration that fits this machine either: use more GPUs, a smaller "
            "model_max_length or a smaller model"
        )
    changes = ", ".join(f"{c.path}: {c.old!r} -> {c.new!r}" for c in result.changes)
    return _(
        "writes a configuration that fits: {changes} (predicted peak {gpu} GiB per GPU, host "
        "RAM {host} GiB)"
    ).format(
        changes=changes,
        gpu=units.gib(after.memory.total_per_gpu, 1),
        host=units.gib(after.memory.host_ram_peak, 1),
    )


def refuse_over_plan(preset: Any, *, ref: str | None = None) -> None:
    """BadInput when the plan says the preset does not fit this machine (``ref``: how the user
    named the preset, for the fix's command)."""
    verdict = plan_verdict(preset)
    if verdict is not None and not verdict.fits:
        raise BadInput(verdict.refusal(preset.name, ref))
