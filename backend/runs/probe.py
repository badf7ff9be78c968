"""Tune, measured: run the planner's top candidates a few steps each on this machine, keep the
fastest in REAL tokens/s, and fall back to the next candidate when one fails (OOM first).

Each candidate is a real launch (``backend.runs.launch``: the same run dir, watcher, entry and
metrics as ``trainwiz launch``) with ``max_steps`` = the probe's steps and no checkpoint saves.
The figure is the median of ``tokens_nonpad_per_s`` over the steps after the warm-up (flex
attention and torch.compile compile in the first step; the startup is reported separately).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.diagnosis import diagnose_text
from backend.errors import BadInput
from backend.i18n import _
from backend.images.ready import missing_method_packages
from backend.planner.learned import lengths_summary, record
from backend.planner.method_search import apply_method, probe_order
from backend.planner.tune import Estimate, TuneResult, _apply
from backend.rundir import LOG, METRICS
from backend.runs.control import refresh as refresh_run
from backend.runs.control import stop_run as stop_candidate
from backend.runs.fallback import OOM_CATEGORIES
from backend.runs.launch import launch as launch_run

# Candidates launched beyond ``top`` when earlier ones fail (OOM, compile budget, crash).
MAX_EXTRA = 2


@dataclass
class ProbeRow:
    label: str
    predicted_real_tokens_per_s: float
    predicted_peak_gib: float
    run_id: str = ""
    run_dir: str = ""
    state: str = ""
    measured_real_tokens_per_s: float | None = None
    measured_peak_gib: float | None = None
    startup_s: float | None = None  # launch to the end of the first step (load, pack, compile)
    steps: int = 0
    oom: bool = False
    source: str = "predicted"  # "measured" once its probe steps ran, "skipped" when it cannot
    skipped: str = ""  # why this candidate cannot run on this machine
    preset: Any = None


@dataclass
class ProbeResult:
    rows: list[ProbeRow] = field(default_factory=list)
    winner: ProbeRow | None = None
    notes: list[str] = field(default_factory=list)


def summarize_metrics(path: Path, warmup: int) -> dict[str, Any]:
    steps, start = [], None
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "step":
                steps.append(rec)
            elif rec.get("kind") == "start":
                start = rec
    timed = steps[warmup:] or steps[-1:]
    out: dict[str, Any] = {"steps": len(steps)}
    if timed:
        out["real"] = statistics.median(r.get("tokens_nonpad_per_s") or 0.0 for r in timed)
        out["peak"] = max(max(r.get("peak_mem_gib") or [0.0]) for r in steps)
    if steps and start:
        out["first_step_at"] = steps[0]["time"] - start["time"]  # train begin -> step 1 end
    return out


def probe_choice(result: TuneResult, top: int) -> list[Estimate]:
    """The ``top`` candidates to measure: the best predicted first (tight ones too: a probe
    falls back on OOM), one per distinct GPU workload (b2 x 4096 and b1 x 8192 run the same
    micro-step), and at least one that is not tight when there is one."""
    pool = result.probe_pool or result.ranked
    chosen: list[Estimate] = []
    seen: set[tuple[Any, ...]] = set()
    for est in pool:
        s = est.settings
        key = (s.tokens_micro, s.grad_accum, s.checkpointing, s.recompute_layers, s.liger,
               s.attn, s.packing, s.offload, s.fsdp, s.compile_layers)  # fmt: skip
        if key in seen:
            continue
        seen.add(key)
        chosen.append(est)
        if len(chosen) == top:
            break
    safe = [e for e in pool if not e.memory.tight]
    if chosen and safe and all(e.memory.tight for e in chosen):
        chosen[-1] = safe[0]
    return chosen


def probe(
    preset: Any,
    result: TuneResult,
    *,
    top: int = 3,
    steps: int = 12,
    warmup: int = 4,
    timeout_s: float = 900.0,
    compile_budget_s: float | None = None,
    cancel: threading.Event | None = None,
    progress: Callable[[str], None] | None = None,
    learn: tuple[str, Any, Any] | None = None,
    launcher: Any = None,
) -> ProbeResult:
    """Launch the ``top`` chosen candidates in turn; the fastest measured one wins.

    ``learn`` = (GPU kind, model shape, length distribution): each measured row is appended to
    that kind's calibration file (backend/planner/learned.py). ``compile_budget_s``: a candidate
    still before its first step after model load + this many seconds is stopped and dropped.
    ``launcher``: (launch, refresh, stop_run) of backend.runs (tests pass a named fake)."""
    say = progress or (lambda _msg: None)
    out = ProbeResult()
    # A candidate that fails (OOM first) makes room for the next one: up to MAX_EXTRA more.
    ranked = probe_choice(result, top + MAX_EXTRA)
    for i, est in enumerate(ranked):
        measured = sum(1 for r in out.rows if r.measured_real_tokens_per_s)
        failed = len(out.rows) - measured
        if measured >= top or i >= top + min(failed, MAX_EXTRA):
            break
        if cancel is not None and cancel.is_set():
            out.notes.append("cancelled")
            break
        row = _row(est)
        say(probe_line(i + 1, min(len(ranked), top), row.label))
        _measure(out, _apply(preset, est.settings), f"{preset.name}-probe{i + 1}", row,
                 steps=steps, warmup=warmup, timeout_s=timeout_s, cancel=cancel,
                 compile_budget_s=compile_budget_s, launcher=launcher)  # fmt: skip
        say(f"  {row.state}: {row.measured_real_tokens_per_s or 0:,.0f} real tokens/s")
        if learn is not None and (row.measured_real_tokens_per_s or row.oom):
            _learn(learn, est, row)
    _pick(out)
    return out


def probe_line(n: int, top: int, label: str) -> str:
    """The progress line of the n-th probe of ``top``; one past them replaces a failed probe."""
    if n <= top:
        return f"probe {n}/{top}: {label}"
    return f"probe {n} (in place of a failed one): {label}"


def _learn(learn: tuple[str, Any, Any], est: Estimate, row: ProbeRow, method: str = "full") -> None:
    gpu_name, shape, dist = learn
    base = est.uncalibrated
    # An OOM says the peak passed the GPU: its capacity is a lower bound on the real peak.
    peak = row.measured_peak_gib
    if row.oom:
        peak = max(peak or 0.0, est.memory.gpu_memory / 2**30)
    record(
        gpu_name, shape, est.settings,
        predicted_real_tokens_per_s=base.throughput.real_tokens_per_s,
        predicted_peak_gib=base.memory.peak_allocated / 2**30,
        measured_real_tokens_per_s=float(row.measured_real_tokens_per_s or 0.0),
        measured_peak_gib=peak, startup_s=row.startup_s, oom=row.oom,
        lengths=lengths_summary(dist, est.settings.seq), run_id=row.run_id, method=method,
    )  # fmt: skip


def probe_methods(
    preset: Any,
    candidates: list[Any],
    *,
    top: int = 3,
    steps: int = 12,
    warmup: int = 4,
    timeout_s: float = 900.0,
    cancel: threading.Event | None = None,
    progress: Callable[[str], None] | None = None,
    learn: tuple[str, Any, Any] | None = None,
    launcher: Any = None,
    compile_budget_s: float | None = None,
) -> ProbeResult:
    """The same probe for LoRA/QLoRA/ZeRO: the method candidates (``search_methods``' best per
    method) and every configuration of theirs that fits, best predicted first
    (``method_search.probe_order``: packed, Liger and not-yet-measured compiled ones too), each
    as ``apply_method`` writes it, until ``top`` ran (one that fails makes room for the next, up
    to MAX_EXTRA more). A method that cannot run on this machine (QLoRA without bitsandbytes or
    CUDA, ZeRO without deepspeed) is never launched: it gets one skipped row with the reason,
    wherever it ranks, so the report says why it was not measured. ``learn`` as for ``probe``:
    each measured (or OOM) row joins the calibration file under its method, which corrects that
    method's next predictions."""
    say = progress or (lambda _msg: None)
    out = ProbeResult()
    why_not: dict[str, str] = {}  # method kind -> why it cannot run here ("" when it can)
    for cand in candidates:  # one row per method that cannot run, wherever it ranks
        kind = cand.method.kind()
        if kind not in why_not:
            why_not[kind] = cannot_run_here(preset, cand.method)
            if why_not[kind]:
                out.rows.append(_skipped(cand, why_not[kind]))
                say(_("probe: {label}: skipped ({why})").format(label=cand.label,
                                                                why=why_not[kind]))  # fmt: skip
    runnable = [c for c in candidates if not why_not[c.method.kind()]]
    launched = 0
    for cand in probe_order(preset, runnable):
        measured = sum(1 for r in out.rows if r.measured_real_tokens_per_s)
        failed = launched - measured
        if measured >= top or launched >= top + min(failed, MAX_EXTRA):
            break
        if cancel is not None and cancel.is_set():
            out.notes.append("cancelled")
            break
        row = _row(cand.estimate)
        row.label = cand.label
        try:
            row.preset = apply_method(preset, cand)
        except ValueError as exc:  # the schema's own verdict (pydantic's ValidationError)
            errors = getattr(exc, "errors", None)
            row.skipped = str(errors()[0]["msg"]) if callable(errors) else str(exc)
            row.state, row.source = "skipped", "skipped"
            out.rows.append(row)
            continue
        launched += 1
        say(probe_line(launched, top, row.label))
        _measure(out, row.preset, f"{preset.name}-probe{launched}", row,
                 steps=steps, warmup=warmup, timeout_s=timeout_s, cancel=cancel,
                 compile_budget_s=compile_budget_s, launcher=launcher)  # fmt: skip
        say(f"  {row.state}: {row.measured_real_tokens_per_s or 0:,.0f} real tokens/s")
        if learn is not None and (row.measured_real_tokens_per_s or row.oom):
            _learn(learn, cand.estimate, row, method=cand.method.kind())
    _pick(out)
    return out


def _skipped(cand: Any, why: str) -> ProbeRow:
    row = _row(cand.estimate)
    row.label, row.skipped, row.state, row.source = cand.label, why, "skipped", "skipped"
    return row


def cannot_run_here(preset: Any, method: Any) -> str:
    """Why ``method`` (a ``MethodSettings``) cannot train ``preset`` on this machine ("" when it
    can): QLoRA's 4-bit base needs CUDA and bitsandbytes in the training environment (a host
    run trains in an existing one; an image gets it installed), ZeRO needs deepspeed. Looked up
    with importlib's find_spec (in the training Python for bitsandbytes), never imported here:
    the wizard process does not import the training side."""
    if method.method == "qlora" and preset.launch.device == "cpu":
        return _("QLoRA's 4-bit base needs bitsandbytes on CUDA; this preset trains on the CPU")
    if method.method == "qlora" and preset.launch.runner == "host":
        # not validated: a full FSDP preset as QLoRA would be refused for its fsdp field
        training = preset.training.model_copy(update={"method": "qlora"})
        python, missing = missing_method_packages(preset.model_copy(update={"training": training}))
        if "bitsandbytes" in missing:
            return _(
                "QLoRA's 4-bit base needs bitsandbytes, which is not installed in the training "
                "environment ({python})"
            ).format(python=python)
    if method.zero_stage and importlib.util.find_spec("deepspeed") is None:
        return _("DeepSpeed ZeRO needs deepspeed, which is not installed here")
    return ""


def _measure(
    out: ProbeResult,
    candidate: Any,
    name: str,
    row: ProbeRow,
    *,
    steps: int,
    warmup: int,
    timeout_s: float,
    cancel: threading.Event | None,
    compile_budget_s: float | None = None,
    launcher: Any = None,
) -> None:
    """Launch one candidate for ``steps`` steps and fill ``row`` with what it measured."""
    launch, refresh, stop_run = launcher or (launch_run, refresh_run, stop_candidate)

    final_preset = candidate.model_copy(deep=True)
    candidate.name = name
    tr = candidate.training
    tr.max_steps, tr.save_strategy, tr.logging_steps = steps, "no", 1
    tr.output_dir = "@run/output"  # never the user's output dir: removed after the probe
    t0 = time.time()
    try:
        launched = launch(candidate)
    except BadInput as exc:  # this candidate cannot start here (environment, ports, disk)
        row.state, row.preset = "not launched", final_preset
        out.notes.append(f"{row.label}: not launched ({exc}); falling back to the next candidate")
        out.rows.append(row)
        return
    row.run_id, row.run_dir = launched.run_id, str(launched.run_dir)
    status = refresh(launched.run_dir)
    over_budget = False
    while not status.final:
        elapsed = time.time() - t0
        if elapsed > timeout_s or (cancel is not None and cancel.is_set()):
            status = stop_run(launched.run_dir)
            out.notes.append(f"{row.label}: stopped after {timeout_s:.0f} s")
            break
        if compile_budget_s is not None and _before_first_step(launched.run_dir, compile_budget_s):
            status = stop_run(launched.run_dir)
            over_budget = True
            break
        time.sleep(2.0)
        status = refresh(launched.run_dir)
    row.state = "over compile budget" if over_budget else status.state
    summary = summarize_metrics(launched.run_dir / METRICS, warmup)
    row.steps = summary["steps"]
    row.measured_real_tokens_per_s = summary.get("real")
    row.measured_peak_gib = summary.get("peak")
    row.startup_s = summary.get("first_step_at")
    row.preset = final_preset
    # A probe's model is not wanted, and at 7B each is 27 GB: a 64 GB disk filled after two
    # (docs/performance.md). Its output dir is trainwiz's own (@run/output): remove it.
    output = launched.run_dir / "output"
    if output.is_dir():
        shutil.rmtree(output, ignore_errors=True)
    if over_budget:
        out.notes.append(
            f"{row.label}: no step within the {compile_budget_s:.0f} s compile budget after the "
            "model loaded: dropped"
        )
        row.measured_real_tokens_per_s = None
    elif row.steps < steps:
        log_path = launched.run_dir / LOG
        log = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
        row.oom = _out_of_memory(log)
        why = "out of memory" if row.oom else f"ended {row.state} after {row.steps} steps"
        out.notes.append(f"{row.label}: {why}; falling back to the next candidate")
        row.measured_real_tokens_per_s = None
    if row.measured_real_tokens_per_s:
        row.source = "measured"
    out.rows.append(row)


def _before_first_step(run_dir: Path, budget_s: float) -> bool:
    """True when the run's trainer started (metrics' start line) more than ``budget_s`` ago
    and no step has ended yet: the first step is compiling past the budget."""
    path = run_dir / METRICS
    if not path.exists():
        return False
    start = None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "step":
            return False
        if rec.get("kind") == "start":
            start = rec.get("time")
    return isinstance(start, (int, float)) and time.time() - start > budget_s


def _pick(out: ProbeResult) -> None:
    done = [r for r in out.rows if r.measured_real_tokens_per_s]
    if done:
        out.winner = max(done, key=lambda r: r.measured_real_tokens_per_s or 0.0)
        predicted = max(
            (r for r in out.rows if not r.skipped), key=lambda r: r.predicted_real_tokens_per_s
        )
        if predicted is not out.winner:
            out.notes.append(_explain_upset(predicted, out.winner))
    else:
        out.notes.append("no candidate finished its probe steps: nothing measured to pick")


def _explain_upset(predicted: ProbeRow, winner: ProbeRow) -> str:
    """Why the measured pick is not the predicted one (``tune --no-probe`` writes the latter)."""

    def measured(row: ProbeRow) -> str:
        if row.measured_real_tokens_per_s:
            return f"measured {row.measured_real_tokens_per_s:,.0f}"
        return "out of memory" if row.oom else f"not measured ({row.state or 'no steps'})"

    return (
        f"the measured winner {winner.label} is not the predicted pick {predicted.label} (what "
        f"--no-probe writes): {predicted.label} predicted "
        f"{predicted.predicted_real_tokens_per_s:,.0f}, {measured(predicted)}; {winner.label} "
        f"predicted {winner.predicted_real_tokens_per_s:,.0f}, {measured(winner)} real "
        "tokens/s here. The probe's figures are this GPU's, so its pick is written"
    )


def _row(est: Estimate) -> ProbeRow:
    return ProbeRow(
        label=est.settings.label(),
        predicted_real_tokens_per_s=est.throughput.real_tokens_per_s,
        predicted_peak_gib=round(est.memory.peak_allocated / 2**30, 2),
    )


def _out_of_memory(log: str) -> bool:
    """The one classifier's verdict (GPU or host out-of-memory), as the OOM fallback uses."""
    findings = diagnose_text(log[-200_000:]).findings  # the end of the log holds the error
    return any(f.category in OOM_CATEGORIES for f in findings)
