"""Memory-failure fixes checked against the planner: tune's answer first, then the fixes the plan
says close the gap, then the rest, marked as not enough on their own.

Why: for a 6.74B full fine-tune that ran out of GPU memory, diagnosis offered expandable segments,
FSDP CPU offload (which tune itself rules out for this host's RAM) and a shorter
``model_max_length``; none of them closes a ~36 GiB gap, and tune's own answer (LoRA) was not
among them. The classifier knows the failure, the planner knows the gap: this module, above
both, makes them agree. Only where the plan's verdict is knowable on this machine
(``backend.runs.plangate.plan_verdict``) and says the preset does not fit: when the plan says it
fits, the failure is one the planner does not model (fragmentation, a spike) and the
classifier's fixes stand as they are.
"""

from __future__ import annotations

from typing import Any

from backend import units
from backend.diagnosis.model import Finding, Fix, PresetChange
from backend.errors import BadInput
from backend.i18n import _
from backend.runs.plangate import UNKNOWABLE, PlanVerdict, plan_verdict, verdict_on

# The failures whose cause is memory the planner predicts (GPU memory, host RAM).
MEMORY_CATEGORIES = frozenset({"cuda_oom", "host_oom"})


def judge_memory_fixes(findings: list[Finding], preset: Any) -> bool:
    """Reorder and mark the fixes of every memory finding (in place); True when judged."""
    memory = [f for f in findings if f.category in MEMORY_CATEGORIES]
    if not memory or preset is None:
        return False
    verdict = plan_verdict(preset, with_fix=False)
    if verdict is None or verdict.fits:
        return False
    answer = _tune_answer(preset, verdict)
    for finding in memory:
        closing: list[Fix] = []
        short: list[Fix] = []
        for fix in finding.fixes:
            (closing if _judge(fix, preset, verdict) else short).append(fix)
        finding.fixes = ([answer] if answer else []) + closing + short
    return True


def _judge(fix: Fix, preset: Any, machine: PlanVerdict) -> bool:
    """Does the preset with this fix fit, by the plan, on ``machine``'s GPU and RAM? Marks the
    fix either way."""
    from backend.diagnosis.apply import apply_fixes  # deferred: pydantic validation, only here

    try:
        fixed = apply_fixes(preset, fix) if fix.changes else preset
        after = (
            plan_verdict(fixed, with_fix=False)
            if fixed.launch != preset.launch  # a fix that moves the run elsewhere: judged anew
            else verdict_on(fixed, machine.gpu, machine.host_ram, with_fix=False)
        )
    except (BadInput, *UNKNOWABLE):
        return False
    if after is None:
        return False
    fix.plan_fits = after.fits
    if after.fits:
        fix.reason += " — " + _("the plan: fits with this change ({need} of {have} GiB)").format(
            need=units.gib(after.estimate.memory.total_per_gpu, 1),
            have=units.gib(after.gpu.memory_bytes, 1),
        )
    else:
        fix.reason += " — " + _("the plan: not enough on its own ({numbers})").format(
            numbers=after.numbers()
        )
    return after.fits


def _tune_answer(preset: Any, verdict: PlanVerdict) -> Fix | None:
    """What ``trainwiz tune`` writes for this preset and machine, as a fix (None: nothing fits)."""
    from backend.planner.tune import tune  # deferred: the candidate search, only when it misfits

    try:
        result = tune(preset, verdict.gpu, verdict.shape, host_ram=verdict.host_ram)
    except UNKNOWABLE:
        return None
    after = result.after
    if not (after.memory.fits and after.fits_host and result.changes):
        return None
    fix = Fix(
        _("tune's answer ({speed:,.0f} real tokens/s predicted)").format(
            speed=after.throughput.real_tokens_per_s
        ),
        _("the plan: fits ({need} of {have} GiB per GPU, host RAM {host} GiB)").format(
            need=units.gib(after.memory.total_per_gpu, 1),
            have=units.gib(verdict.gpu.memory_bytes, 1),
            host=units.gib(after.memory.host_ram_peak, 1),
        ),
        [PresetChange(c.path, c.new, c.reason) for c in result.changes],
    )
    fix.plan_fits = True
    return fix
