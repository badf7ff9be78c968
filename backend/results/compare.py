"""Runs side by side: their loss curves, the preset fields that differ, and what they cost.

One reader for ``trainwiz runs compare`` and the wizard's Compare view. Every figure comes from
the runs' own files through the readers the rest of trainwiz uses (the continued metrics series,
so a resumed run counts each step once; attempts.json for the time a run really trained), so a
comparison never disagrees with ``trainwiz runs`` or the Monitor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backend.errors import BadInput
from backend.i18n import _
from backend.monitor.metrics import RunStart, continued_series, finite, mean_loss, read_events
from backend.rundir import METRICS, PRESET, read_status
from backend.runs.resume import read_attempts

# The only preset keys that never make two runs different in a way worth showing.
_IGNORED = ("description",)


@dataclass
class RunFigures:
    run_id: str
    preset: str
    state: str
    steps: int = 0
    max_steps: int | None = None
    final_loss: float | None = None
    min_loss: float | None = None
    min_loss_step: int | None = None
    mean_loss: float | None = None
    final_eval_loss: float | None = None
    min_eval_loss: float | None = None
    real_tokens_per_s: float | None = None  # real (non-pad) tokens over step time, all steps
    wall_s: float | None = None  # the attempts' running time, gaps between them left out
    gpus: int = 0  # world size (0: a CPU run)
    gpu_hours: float | None = None
    loss: tuple[list[int], list[float]] = field(default_factory=lambda: ([], []))
    eval_loss: tuple[list[int], list[float]] = field(default_factory=lambda: ([], []))


@dataclass
class Comparison:
    runs: list[RunFigures]
    # dotted preset path -> one value per run (None where a run's preset lacks it)
    differences: dict[str, list[Any]]


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: data}


def preset_differences(run_dirs: list[Path]) -> dict[str, list[Any]]:
    """The preset fields (as the runs recorded them in preset.yaml) whose values differ."""
    flat = []
    for run_dir in run_dirs:
        try:
            data = yaml.safe_load((run_dir / PRESET).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            data = {}
        flat.append(_flatten(data))
    keys = sorted({k for f in flat for k in f if k.split(".")[0] not in _IGNORED})
    return {k: [f.get(k) for f in flat] for k in keys if len({repr(f.get(k)) for f in flat}) > 1}


def _wall_seconds(run_dir: Path, started: float | None, ended: float | None) -> float | None:
    """Time the run trained: the sum of its attempts (a resume a day later adds no day)."""
    total = 0.0
    for attempt in read_attempts(run_dir):
        begin, end = attempt.get("started_at"), attempt.get("ended_at")
        if isinstance(begin, (int, float)):
            stop = end if isinstance(end, (int, float)) else time.time()
            total += max(0.0, float(stop) - float(begin))
    if total:
        return total
    if started is None:
        return None
    return max(0.0, (ended or time.time()) - started)


def run_figures(run_dir: Path) -> RunFigures:
    status = read_status(run_dir)
    out = RunFigures(status.run_id, status.preset, status.state)
    events = read_events(run_dir / METRICS) if (run_dir / METRICS).is_file() else []
    steps, evals = continued_series(events)
    starts = [e for e in events if isinstance(e, RunStart)]
    if steps:
        out.steps, out.max_steps = steps[-1].step, steps[-1].max_steps
    losses = [(s.step, s.loss) for s in steps if s.loss is not None and finite(s.loss)]
    if losses:
        out.loss = ([s for s, _l in losses], [float(v) for _s, v in losses])
        out.final_loss = losses[-1][1]
        out.min_loss_step, out.min_loss = min(losses, key=lambda p: p[1])
    out.mean_loss = mean_loss(steps)
    good = [e for e in evals if finite(e.eval_loss)]
    if good:
        out.eval_loss = ([e.step for e in good], [e.eval_loss for e in good])
        out.final_eval_loss = good[-1].eval_loss
        out.min_eval_loss = min(e.eval_loss for e in good)
    timed = [s for s in steps if s.tokens_nonpad and s.step_time_s and s.step_time_s > 0]
    seconds = sum(s.step_time_s or 0.0 for s in timed)
    if seconds > 0:
        out.real_tokens_per_s = sum(s.tokens_nonpad or 0 for s in timed) / seconds
    out.wall_s = _wall_seconds(run_dir, status.started_at, status.ended_at)
    world = next((s.world_size for s in reversed(starts) if s.world_size), None)
    on_gpu = any(s.gpu_name for s in starts) or _device(run_dir) == "cuda"
    out.gpus = int(world or 1) if on_gpu else 0
    if out.wall_s is not None:
        out.gpu_hours = out.gpus * out.wall_s / 3600
    return out


def _device(run_dir: Path) -> str:
    try:
        data = yaml.safe_load((run_dir / PRESET).read_text(encoding="utf-8")) or {}
        return str((data.get("launch") or {}).get("device") or "cuda")
    except (OSError, yaml.YAMLError, AttributeError):
        return "cuda"


def compare_runs(run_dirs: list[Path]) -> Comparison:
    """Two or more runs, in the order given; the same run twice is refused."""
    if len(run_dirs) < 2:
        raise BadInput(_("compare needs at least two runs (trainwiz runs lists them)"))
    seen = [d.resolve() for d in run_dirs]
    if len(set(seen)) != len(seen):
        raise BadInput(_("the same run is named twice: compare different runs"))
    return Comparison([run_figures(d) for d in run_dirs], preset_differences(run_dirs))
