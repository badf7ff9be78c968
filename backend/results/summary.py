"""What a run produced: steps, losses, eval losses, checkpoints, attempts, hardware.

One reader for ``trainwiz runs``, the model card and ``chat``/``export``'s choice of weights, so
they never disagree about a run's final loss or its last checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from backend.monitor.figures import cached_figures, figures_of
from backend.monitor.metrics import EvalRecord, RunEnd, RunStart, continued_series, read_events
from backend.rundir import METRICS
from backend.runs.resume import checkpoints, output_dir, read_attempts


@dataclass
class RunSummary:
    steps: int = 0
    max_steps: int | None = None
    final_loss: float | None = None  # the last logged train loss
    train_loss: float | None = None  # mean over the run's steps counted (backend.monitor.figures)
    eval_loss: float | None = None  # the last eval
    best_eval_loss: float | None = None
    best_eval_step: int | None = None
    evals: list[EvalRecord] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=list)
    last_checkpoint: int | None = None
    attempts: int = 1
    ok: bool | None = None
    world_size: int | None = None
    gpu_name: str | None = None
    output_dir: str | None = None
    # backend.monitor.figures' definitions, as every other view shows them
    real_tokens_per_s: float | None = None
    attempt_real_tokens_per_s: float | None = None  # the last attempt's own pace
    wall_s: float | None = None
    gpus: int = 0
    gpu_hours: float | None = None


def run_summary(run_dir: Path) -> RunSummary:
    events = read_events(run_dir / METRICS) if (run_dir / METRICS).is_file() else []
    _steps, evals = continued_series(events)
    fig = figures_of(events)
    out = RunSummary(evals=evals, steps=fig.step, max_steps=fig.max_steps)
    out.final_loss, out.train_loss = fig.last_loss, fig.mean_loss
    out.real_tokens_per_s, out.wall_s = fig.real_tokens_per_s, fig.wall_s
    out.gpus, out.gpu_hours = fig.gpus, fig.gpu_hours
    out.attempt_real_tokens_per_s = fig.attempt.real_tokens_per_s if fig.attempt else None
    if evals:
        out.eval_loss = evals[-1].eval_loss
        best = min(evals, key=lambda e: e.eval_loss)
        out.best_eval_loss, out.best_eval_step = best.eval_loss, best.step
    for ev in events:
        if isinstance(ev, RunStart):
            out.world_size, out.gpu_name = ev.world_size, ev.gpu_name
        elif isinstance(ev, RunEnd):
            out.ok = ev.ok
            out.train_loss = out.train_loss if out.train_loss is not None else ev.train_loss
    found = checkpoints(run_dir)
    out.checkpoints = [step for step, _ in found]
    out.last_checkpoint = out.checkpoints[-1] if out.checkpoints else None
    out.attempts = max(1, len(read_attempts(run_dir)))
    where = output_dir(run_dir)
    out.output_dir = str(where) if where is not None else None
    return out


def brief(run_dir: Path) -> dict[str, float | int | None]:
    """What ``trainwiz runs`` adds per run, cheaply: only eval lines are parsed here (a long
    run's metrics file is mostly step lines), the figures come from the run's figures.json
    while metrics.jsonl is unchanged (``cached_figures``), checkpoints are listed, not opened."""
    best: float | None = None
    path = run_dir / METRICS
    if path.is_file():
        with open(path, "rb") as handle:
            for raw in handle:
                if b'"eval"' not in raw:
                    continue
                try:
                    loss = json.loads(raw).get("eval_loss")
                except ValueError:
                    continue
                if isinstance(loss, (int, float)) and (best is None or loss < best):
                    best = float(loss)
    found = checkpoints(run_dir)
    fig = cached_figures(run_dir)
    return {
        "best_eval_loss": best,
        "last_checkpoint": found[-1][0] if found else None,
        "real_tokens_per_s": fig.real_tokens_per_s,
        "wall_s": fig.wall_s,
        "gpus": fig.gpus,
        "gpu_hours": fig.gpu_hours,
        "mean_loss": fig.mean_loss,
    }
