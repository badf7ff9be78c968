"""Runs side by side: their loss curves, the preset fields that differ, and what they cost.

One reader for ``trainwiz runs compare`` and the wizard's Compare view. Every figure comes from
the runs' own files through the readers the rest of trainwiz uses (the continued metrics series,
so a resumed run counts each step once; ``backend.monitor.figures`` for real tokens/s, wall time,
GPU-hours and mean loss), so a comparison never disagrees with ``trainwiz runs`` or the Monitor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backend.errors import BadInput
from backend.i18n import _
from backend.monitor.figures import figures_of
from backend.monitor.metrics import continued_series, finite, read_events
from backend.rundir import METRICS, PRESET, read_status

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
    real_tokens_per_s: float | None = None  # backend.monitor.figures' definitions, all four
    wall_s: float | None = None  # the attempts' first step to last step, gaps left out
    gpus: int = 0  # the last attempt's world size (0: a CPU run)
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


def run_figures(run_dir: Path) -> RunFigures:
    status = read_status(run_dir)
    out = RunFigures(status.run_id, status.preset, status.state)
    events = read_events(run_dir / METRICS) if (run_dir / METRICS).is_file() else []
    steps, evals = continued_series(events)
    fig = figures_of(events)
    out.steps, out.max_steps = fig.step, fig.max_steps
    losses = [(s.step, s.loss) for s in steps if s.loss is not None and finite(s.loss)]
    if losses:
        out.loss = ([s for s, _l in losses], [float(v) for _s, v in losses])
        out.final_loss = losses[-1][1]
        out.min_loss_step, out.min_loss = min(losses, key=lambda p: p[1])
    out.mean_loss = fig.mean_loss
    good = [e for e in evals if finite(e.eval_loss)]
    if good:
        out.eval_loss = ([e.step for e in good], [e.eval_loss for e in good])
        out.final_eval_loss = good[-1].eval_loss
        out.min_eval_loss = min(e.eval_loss for e in good)
    out.real_tokens_per_s, out.wall_s = fig.real_tokens_per_s, fig.wall_s
    out.gpus, out.gpu_hours = fig.gpus, fig.gpu_hours
    return out


def compare_runs(run_dirs: list[Path]) -> Comparison:
    """Two or more runs, in the order given; the same run twice is refused."""
    if len(run_dirs) < 2:
        raise BadInput(_("compare needs at least two runs (trainwiz runs lists them)"))
    seen = [d.resolve() for d in run_dirs]
    if len(set(seen)) != len(seen):
        raise BadInput(_("the same run is named twice: compare different runs"))
    return Comparison([run_figures(d) for d in run_dirs], preset_differences(run_dirs))
