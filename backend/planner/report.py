"""Plain-text renderings of a plan and a tune result, shared by the CLI and the form.

Text, not widgets: the CLI prints it and the wizard shows it in a Static, so both say the same.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from backend.errors import BadInput
from backend.i18n import _
from backend.planner import gpu as planner_gpu
from backend.planner.gpu import GIB, GpuSpec, gpu_spec
from backend.planner.method_search import method_lines
from backend.planner.methods import estimate_preset
from backend.planner.realdata import default_dist, dist_from_report
from backend.planner.settings import settings_from_preset
from backend.planner.shape import ModelShape, shape_for_preset, shape_from_config
from backend.planner.tune import Estimate, TuneResult, tune
from backend.preset.loader import preset_to_yaml
from backend.units import gib_column


def estimate_lines(est: Estimate, shape: ModelShape, gpu: GpuSpec) -> list[str]:
    mem, thr, s = est.memory, est.throughput, est.settings
    verdict = (
        (_("FITS (tight: within the planner's 10% error)") if mem.tight else _("FITS"))
        if mem.fits
        else _("DOES NOT FIT")
    )
    lines = [
        _(
            "model: {params}B params, {layers} layers, hidden {hidden}, vocab {vocab} ({source})"
        ).format(
            params=f"{shape.n_params / 1e9:.2f}",
            layers=shape.layers,
            hidden=shape.hidden,
            vocab=shape.vocab,
            source=shape.source or _("shape given"),
        ),
        _(
            "GPU: {world} x {gpu} ({memory} GiB, {tflops} TFLOP/s bf16); FSDP {strategy}{offload}, "
            "state divided by {shards}"
        ).format(
            world=s.world,
            gpu=gpu.name,
            memory=f"{gpu.memory_gib:.1f}",
            tflops=f"{gpu.peak_flops / 1e12:.0f}",
            strategy=s.strategy,
            offload=" + CPU offload" if s.offload else "",
            shards=s.shard_n,
        ),
        _("config: {label}, seq {seq}, global batch {batch}").format(
            label=s.label(), seq=s.seq, batch=s.global_batch
        ),
        _("memory per GPU (each term at its own peak):"),
    ]
    for term, value in mem.breakdown.items():
        if value:
            lines.append(f"  {term:<28} {gib_column(value)}")
    for phase, value in mem.phases.items():
        lines.append(
            "  "
            + _("phase {phase} {size} allocated").format(
                phase=f"{phase:<22}", size=gib_column(value)
            )
        )
    real = (
        _("packed rows {share} filled").format(share=f"{thr.real_fraction:.0%}")
        if s.packing
        else _("padding {share} of the compute").format(share=f"{1 - thr.real_fraction:.0%}")
    )
    lines += [
        "  "
        + _(
            "peak allocated {allocated}, reserved {reserved}, with CUDA context/NCCL {total} of "
            "{memory}: {verdict}"
        ).format(
            allocated=gib_column(mem.peak_allocated),
            reserved=gib_column(mem.peak_reserved),
            total=gib_column(mem.total_per_gpu),
            memory=gib_column(mem.gpu_memory),
            verdict=verdict,
        ),
        _("host RAM: {size} while ranks load fp32 weights").format(
            size=gib_column(mem.host_ram_load)
        )
        + (
            _(", {size} of offloaded states").format(size=gib_column(mem.host_ram_offload))
            if mem.host_ram_offload
            else ""
        ),
        _("throughput: {tokens} tokens/s ({per_gpu} per GPU), MFU {mfu}, step {step} s").format(
            tokens=f"{thr.tokens_per_s:,.0f}",
            per_gpu=f"{thr.tokens_per_s_per_gpu:,.0f}",
            mfu=f"{thr.mfu:.1%}",
            step=f"{thr.step_time_s:.2f}",
        ),
        _("real tokens (no padding): {tokens} tokens/s, real-token MFU {mfu} (6N); ").format(
            tokens=f"{thr.real_tokens_per_s:,.0f}", mfu=f"{thr.real_mfu:.1%}"
        )
        + real
        + (
            _("; epoch {hours} h").format(hours=f"{thr.epoch_time_s / 3600:.2f}")
            if thr.epoch_time_s
            else ""
        ),
        "  " + _("token lengths: {source}").format(source=thr.length_source),
    ]
    if est.host_ram is not None:
        lines.append(
            _("host RAM peak {peak} of {total}: ").format(
                peak=gib_column(mem.host_ram_peak), total=gib_column(est.host_ram)
            )
            + (_("fits") if est.fits_host else _("does NOT fit the host (the OOM killer ends it)"))
        )
    lines += [_("note: {note}").format(note=n) for n in [*mem.notes, *thr.notes]]
    return lines


def tune_lines(result: TuneResult, before_yaml: str, after_yaml: str) -> list[str]:
    b, a = result.before.throughput, result.after.throughput
    lines = [
        _(
            "tune: {changes} change(s) among {candidates} configurations; {before} -> {after} "
            "real tokens/s (x{speedup}; computed {computed_before} -> {computed_after}), "
            "peak {peak} GiB per GPU"
        ).format(
            changes=len(result.changes),
            candidates=result.candidates,
            before=f"{b.real_tokens_per_s:,.0f}",
            after=f"{a.real_tokens_per_s:,.0f}",
            speedup=f"{result.speedup:.1f}",
            computed_before=f"{b.tokens_per_s:,.0f}",
            computed_after=f"{a.tokens_per_s:,.0f}",
            peak=f"{result.after.memory.total_per_gpu / GIB:.1f}",
        ),
    ]
    for change in result.changes:
        lines.append(f"  {change.path}: {change.old!r} -> {change.new!r}  ({change.reason})")
    if result.batch and result.changes:
        lines.append("  " + result.batch)
    lines += [_("note: {note}").format(note=n) for n in result.notes]
    lines += method_lines(result)
    diff = difflib.unified_diff(
        before_yaml.splitlines(), after_yaml.splitlines(), "preset", "tuned", lineterm=""
    )
    lines += list(diff)
    return lines


def estimate_dict(est: Estimate, shape: ModelShape, gpu: GpuSpec) -> dict[str, Any]:
    """JSON-ready view (bytes as integers, GiB rounded alongside)."""
    mem, thr = est.memory, est.throughput
    return {
        "gpu": {"name": gpu.name, "memory_bytes": gpu.memory_bytes, "count": est.settings.world},
        "model": {"n_params": shape.n_params, "layers": shape.layers, "hidden": shape.hidden},
        "settings": est.settings.label(),
        "memory": {
            "breakdown": mem.breakdown,
            "phases": mem.phases,
            "peak_allocated": mem.peak_allocated,
            "peak_reserved": mem.peak_reserved,
            "total_per_gpu": mem.total_per_gpu,
            "total_per_gpu_gib": round(mem.total_per_gpu / GIB, 2),
            "fits": mem.fits,
            "tight": mem.tight,
            "host_ram_peak": mem.host_ram_peak,
            "host_ram": est.host_ram,
            "fits_host": est.fits_host,
        },
        "throughput": {
            "tokens_per_s": round(thr.tokens_per_s, 1),
            "tokens_per_s_per_gpu": round(thr.tokens_per_s_per_gpu, 1),
            "mfu": round(thr.mfu, 4),
            "step_time_s": round(thr.step_time_s, 4),
            "real_tokens_per_s": round(thr.real_tokens_per_s, 1),
            "real_fraction": round(thr.real_fraction, 4),
            "real_mfu": round(thr.real_mfu, 4),
            "epoch_time_s": round(thr.epoch_time_s, 1) if thr.epoch_time_s else None,
            "length_source": thr.length_source,
        },
        "notes": [*mem.notes, *thr.notes],
    }


def resolve_inputs(
    preset: Any, gpu_name: str | None, config_path: str | None
) -> tuple[GpuSpec | None, ModelShape | None, str]:
    """(gpu, shape, why-not) for the CLI: named GPU, else this machine's, else none."""

    if preset.launch.device == "cpu":
        return None, None, _("the preset trains on the CPU (launch.device: cpu): no GPU plan")
    # detect_local via its module, so that a stand-in detector reaches it.
    gpu = gpu_spec(gpu_name) if gpu_name else planner_gpu.detect_local()
    if gpu is None:
        return (
            None,
            None,
            _("no GPU named and none found here: pass --gpu (e.g. h200, a100, a100-40g)"),
        )
    shape: ModelShape | None
    if config_path:
        try:
            data = json.loads(Path(config_path).expanduser().read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BadInput(
                _("--config {config_path}: cannot read a JSON config ({exc})").format(
                    config_path=config_path, exc=exc
                )
            ) from exc
        shape = shape_from_config(data, source=config_path)
    else:
        shape = shape_for_preset(preset)
    if shape is None:
        return (
            gpu,
            None,
            _("model.dir {dir} has no config.json yet: pass --config PATH/config.json").format(
                dir=preset.model.dir
            ),
        )
    return gpu, shape, ""


def plan_estimate(
    preset: Any,
    gpu: GpuSpec,
    shape: ModelShape,
    *,
    dist: Any = None,
    host_ram: int | None = None,
    measured: list[dict[str, Any]] | None = None,
) -> Estimate:
    """The estimate ``trainwiz plan`` prints, and the one the launch's gate judges
    (``backend.runs.plangate``): one function, so the two never give different verdicts. Full
    (FSDP) or LoRA/QLoRA/ZeRO (methods.py), corrected by this GPU kind's probe rows."""
    from backend.planner.learned import (  # deferred: calibration rows, only when estimating
        adjust,
        load_rows,
    )

    rows = load_rows(gpu.name) if measured is None else measured
    est = estimate_preset(shape, preset, gpu, dist or default_dist(), host_ram)
    result: Estimate = adjust(est, shape, rows)
    return result


def planner_report(
    preset: Any,
    gpu_name: str | None,
    config_path: str | None,
    *,
    do_tune: bool = False,
    free_batch: bool = False,
    lengths: str | None = None,
    host_ram: int | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Text lines and JSON for ``trainwiz plan``'s estimate (and ``--tune``) section."""
    gpu, shape, why = resolve_inputs(preset, gpu_name, config_path)
    if gpu is None or shape is None:
        return [_("estimate: {why}").format(why=why)], {"estimate": None, "reason": why}

    dist = dist_from_report(lengths) if lengths else default_dist()
    from backend.planner.learned import (  # deferred: calibration rows, only when estimating
        error_lines,
        load_rows,
    )

    measured = load_rows(gpu.name)
    est = plan_estimate(preset, gpu, shape, dist=dist, host_ram=host_ram, measured=measured)
    lines = estimate_lines(est, shape, gpu)
    lines += error_lines(gpu.name, measured)
    data: dict[str, Any] = {"estimate": estimate_dict(est, shape, gpu)}
    if preset.launch.nnodes > 1:  # the link between nodes (backend/planner/multinode.py)
        from backend.planner.multinode import (  # deferred: scaling tables, only for a report
            scaling,
            scaling_lines,
        )

        across = scaling(shape, settings_from_preset(preset), gpu)
        lines += scaling_lines(across)
        data["multinode"] = asdict(across)
    if do_tune:
        result = tune(preset, gpu, shape, free_batch=free_batch, dist=dist, host_ram=host_ram)
        lines += tune_lines(result, preset_to_yaml(preset), preset_to_yaml(result.preset))
        data["methods"] = [c.as_dict() for c in result.methods]
        data["tune"] = {
            "changes": [
                {"path": c.path, "old": c.old, "new": c.new, "reason": c.reason}
                for c in result.changes
            ],
            "after": estimate_dict(result.after, shape, gpu),
            "preset_yaml": preset_to_yaml(result.preset),
            "notes": result.notes,
        }
    return lines, data
