"""The planner learns the machine: measured probe rows per GPU kind, and the correction they imply.

Every probe (``trainwiz tune`` measuring its candidates) appends one row to
``TRAINWIZ_HOME/calibration/<gpu kind>.jsonl``: the model's shape, the settings in the planner's
own terms, the data's lengths (summary), what the BASE model (fitted constants, no correction)
predicted and what was measured (real tokens/s, peak allocated GiB, startup). The next
prediction for that GPU kind multiplies the base model's step time and peak memory by the
weighted geometric mean of measured/predicted over the rows, weighting rows by how alike they
are (same packing/recompute/Liger/FSDP, close row length and model size), shrunk toward 1 when
the evidence is thin. The base model stays the prior; the file is the machine's posterior.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from backend.i18n import _
from backend.paths import home
from backend.planner.gpu import GIB
from backend.planner.memory import FIT_MARGIN, TIGHT_MARGIN, MemoryPlan
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape
from backend.planner.throughput import ThroughputPlan

# How much one matching row counts against the prior (1 = no change): with weight w the
# correction is exp(sum(w ln r) / (sum(w) + PRIOR_WEIGHT)).
PRIOR_WEIGHT = 0.25
# A row whose settings differ in kind (packing, recompute, Liger, FSDP) still says something
# about the machine, but less.
OTHER_KIND_WEIGHT = 0.2
# Corrections beyond these are more likely a broken probe than the machine.
TIME_CLAMP = (0.5, 2.0)
MEMORY_CLAMP = (0.8, 1.25)


def kind_key(gpu_name: str) -> str:
    """File-safe name of a GPU kind ("NVIDIA H200" -> "nvidia-h200"; "cpu" for the CPU)."""
    return re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "unknown"


def calibration_path(gpu_name: str) -> Path:
    return home() / "calibration" / f"{kind_key(gpu_name)}.jsonl"


def load_rows(gpu_name: str) -> list[dict[str, Any]]:
    """The measured rows for this GPU kind (a broken line is skipped, never fatal)."""
    path = calibration_path(gpu_name)
    rows: list[dict[str, Any]] = []
    if not path.is_file():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and (row.get("measured_real_tokens_per_s") or row.get("oom")):
            rows.append(row)
    return rows


def record(
    gpu_name: str,
    shape: ModelShape,
    settings: TrainSettings,
    *,
    predicted_real_tokens_per_s: float,
    predicted_peak_gib: float,
    measured_real_tokens_per_s: float,
    measured_peak_gib: float | None,
    startup_s: float | None,
    lengths: dict[str, float],
    run_id: str = "",
    oom: bool = False,
    method: str = "full",
) -> Path:
    """Append one measured row (predictions are the BASE model's, so the ratio stays honest).
    ``method``: MethodSettings.kind() of a LoRA/QLoRA/ZeRO probe ("full": FSDP's own)."""
    path = calibration_path(gpu_name)
    path.parent.mkdir(parents=True, exist_ok=True)
    row = {
        "time": round(time.time(), 1),
        "gpu": gpu_name,
        "shape": {"n_params": shape.n_params, "layers": shape.layers, "hidden": shape.hidden},
        "settings": asdict(settings),
        "label": settings.label(),
        "lengths": lengths,
        "predicted_real_tokens_per_s": round(predicted_real_tokens_per_s, 1),
        "measured_real_tokens_per_s": round(measured_real_tokens_per_s, 1),
        "predicted_peak_gib": round(predicted_peak_gib, 2),
        "measured_peak_gib": measured_peak_gib,
        "startup_s": startup_s,
        "run_id": run_id,
        "oom": oom,
        "method": method,
    }
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(row, sort_keys=True) + "\n")
    return path


def _kind(s: dict[str, Any]) -> tuple[bool, ...]:
    fsdp = any(t in str(s.get("fsdp", "")).split() for t in ("full_shard", "shard_grad_op",
                                                              "hybrid_shard", "no_shard"))  # fmt: skip
    recompute = bool(s.get("trainer_gc") or s.get("fsdp_ac") or s.get("recompute_layers"))
    # Rows written before regional compile existed have no such key: not compiled.
    return (bool(s.get("packing")), recompute, bool(s.get("liger")), fsdp,
            bool(s.get("compile_layers")))  # fmt: skip


def _row_len(s: dict[str, Any]) -> int:
    return int((s.get("pack_tokens") or s.get("seq") or 1) if s.get("packing") else s.get("seq", 1))


def weight(
    row: dict[str, Any], shape: ModelShape, settings: TrainSettings, method: str = "full"
) -> float:
    """Similarity of a measured row to the configuration being predicted (1 = the same). Rows
    of another training method (LoRA, QLoRA, a ZeRO layout; rows before methods were probed
    are FSDP's "full") say nothing here: each method has its own model and its own error."""
    if str(row.get("method") or "full") != method:
        return 0.0
    s = row.get("settings") or {}
    here = asdict(settings)
    w = 1.0 if _kind(s) == _kind(here) else OTHER_KIND_WEIGHT
    dist = abs(math.log(max(_row_len(s), 1) / max(settings.row, 1)))
    dist += abs(math.log(max(int(s.get("micro_batch", 1)), 1) / max(settings.micro_batch, 1)))
    params = int((row.get("shape") or {}).get("n_params") or shape.n_params)
    dist += 2 * abs(math.log(max(params, 1) / max(shape.n_params, 1)))
    return w * math.exp(-dist)


@dataclass(frozen=True)
class Correction:
    time: float = 1.0  # multiply the base step time
    memory: float = 1.0  # multiply the base peak memory
    rows: int = 0  # measured rows it came from
    weight: float = 0.0  # their summed similarity

    @property
    def applied(self) -> bool:
        return self.rows > 0 and (abs(self.time - 1) > 1e-3 or abs(self.memory - 1) > 1e-3)


def _clamp(x: float, bounds: tuple[float, float]) -> float:
    return min(max(x, bounds[0]), bounds[1])


def correction(
    rows: list[dict[str, Any]], shape: ModelShape, settings: TrainSettings, method: str = "full"
) -> Correction:
    num_t = num_m = w_t = w_m = 0.0
    rows = [r for r in rows if weight(r, shape, settings, method) > 0]
    for row in rows:
        w = weight(row, shape, settings, method)
        pred, got = row.get("predicted_real_tokens_per_s"), row.get("measured_real_tokens_per_s")
        if pred and got:
            num_t += w * math.log(float(pred) / float(got))  # step time ratio = rate ratio^-1
            w_t += w
        pred_m, got_m = row.get("predicted_peak_gib"), row.get("measured_peak_gib")
        if pred_m and got_m:
            ratio = math.log(float(got_m) / float(pred_m))
            if row.get("oom"):  # a lower bound: it only ever raises the correction
                ratio = max(ratio, num_m / w_m if w_m else 0.0)
            num_m += w * ratio
            w_m += w
    return Correction(
        time=_clamp(math.exp(num_t / (w_t + PRIOR_WEIGHT)), TIME_CLAMP) if w_t else 1.0,
        memory=_clamp(math.exp(num_m / (w_m + PRIOR_WEIGHT)), MEMORY_CLAMP) if w_m else 1.0,
        rows=len(rows),
        weight=round(w_t, 3),
    )


def corrected_throughput(thr: ThroughputPlan, c: Correction) -> ThroughputPlan:
    f = c.time
    return replace(
        thr,
        step_time_s=thr.step_time_s * f,
        micro_step_s=thr.micro_step_s * f,
        tokens_per_s=thr.tokens_per_s / f,
        tokens_per_s_per_gpu=thr.tokens_per_s_per_gpu / f,
        real_tokens_per_s=thr.real_tokens_per_s / f,
        mfu=thr.mfu / f,
        real_mfu=thr.real_mfu / f,
        epoch_time_s=thr.epoch_time_s * f if thr.epoch_time_s else thr.epoch_time_s,
        notes=[
            *thr.notes,
            f"calibrated on this GPU kind: step time x{f:.3f} ({c.rows} probe rows)",
        ],
    )


def corrected_memory(mem: MemoryPlan, c: Correction) -> MemoryPlan:
    f = c.memory
    if abs(f - 1) < 1e-3:
        return mem
    alloc, reserved = int(mem.peak_allocated * f), int(mem.peak_reserved * f)
    reserved = max(min(reserved, max(mem.gpu_memory - mem.fixed, 0)), alloc)
    out = replace(mem, peak_allocated=alloc, peak_reserved=reserved,
                  total_per_gpu=reserved + mem.fixed, notes=list(mem.notes))  # fmt: skip
    wanted = int((mem.peak_reserved + mem.fixed) * f)
    out.fits = alloc + mem.fixed <= (1 - FIT_MARGIN) * mem.gpu_memory
    out.tight = out.fits and wanted > (1 - TIGHT_MARGIN) * mem.gpu_memory
    out.headroom = mem.gpu_memory - wanted
    out.notes.append(f"calibrated on this GPU kind: peak memory x{f:.3f}")
    return out


def lengths_summary(dist: Any, seq: int) -> dict[str, float]:
    t = sorted(dist.truncated(seq))
    if not t:
        return {}
    return {"n": len(t), "mean": round(sum(t) / len(t), 1), "p50": t[len(t) // 2],
            "attended": round(dist.attended(seq), 1)}  # fmt: skip


def error_lines(gpu_name: str, rows: list[dict[str, Any]] | None = None) -> list[str]:
    """What ``plan`` says about the model's error on this GPU kind (the probes' verdict)."""
    rows = load_rows(gpu_name) if rows is None else rows
    path = calibration_path(gpu_name)
    if not rows:
        return [
            _(
                "prediction error: no probe measured on {gpu} yet ({path}); `trainwiz tune` on "
                "such a GPU measures its candidates and records them there"
            ).format(gpu=gpu_name, path=path)
        ]
    errors = sorted(
        float(r["predicted_real_tokens_per_s"]) / float(r["measured_real_tokens_per_s"]) - 1
        for r in rows
        if r.get("predicted_real_tokens_per_s") and r.get("measured_real_tokens_per_s")
    )
    within = sum(abs(e) <= 0.10 for e in errors)
    mid = errors[len(errors) // 2] if errors else 0.0
    return [
        _(
            "prediction error on {gpu} (base model vs {n} probe rows in {path}): median {mid}, "
            "range {lo} .. {hi}, {within} of {n} within +-10%; this plan is corrected by them"
        ).format(
            gpu=gpu_name,
            n=len(errors),
            path=path,
            mid=f"{mid:+.1%}",
            lo=f"{errors[0]:+.1%}",
            hi=f"{errors[-1]:+.1%}",
            within=within,
        )
    ]


def adjust(est: Any, shape: ModelShape, rows: list[dict[str, Any]]) -> Any:
    """``est`` (a tune Estimate) with this GPU kind's correction applied (unchanged: no rows
    of its method). An estimate already corrected is left as it is."""
    if not rows or est.base is not None:
        return est
    c = correction(rows, shape, est.settings, est.method)
    if not c.applied:
        return est
    return replace(est, memory=corrected_memory(est.memory, c),
                   throughput=corrected_throughput(est.throughput, c), base=est)  # fmt: skip


__all__ = ["GIB", "Correction", "adjust", "calibration_path", "correction", "error_lines",
           "kind_key", "load_rows", "record"]  # fmt: skip
