"""A run in one line: what a finished or failed launch or resume prints last, and what its
end-of-run notification says.

The numbers come from the run's own files (metrics.jsonl through ``backend.monitor.figures``, the
one definition of each figure, the log through the diagnosis classifier), so the line never says
more than the record holds and never differs from the Monitor, ``runs compare`` or the model card.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.diagnosis import diagnose_file
from backend.diagnosis.model import Finding
from backend.i18n import _
from backend.monitor.figures import figures_of
from backend.monitor.metrics import MetricsFollower, RunEnd, read_events
from backend.monitor.tracker import RunTracker
from backend.rundir import LOG, METRICS
from backend.units import duration


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    steps: int
    max_steps: int | None
    loss_first: float | None
    loss_last: float | None
    real_tokens_per_s: float | None  # the run's, over its steps counted (backend.monitor.figures)
    output_dir: str | None
    top_finding: Finding | None = None
    loss_mean: float | None = None  # over every step of every attempt, each counted once
    wall_s: float | None = None
    gpus: int = 0
    gpu_hours: float | None = None
    attempts: int = 1
    attempt_real_tokens_per_s: float | None = None  # the last attempt's, over its own steps

    @property
    def mean_loss(self) -> float | None:
        return self.loss_mean

    def line(self) -> str:
        """'150/150 steps, loss 6.29 → 1.87 (mean 2.4), 1,234 real tokens/s, wall time 3m05s,
        0.10 GPU-hours, model in DIR'; a resumed run adds its last attempt's pace."""
        parts = [
            _("{steps}/{max_steps} steps").format(steps=self.steps, max_steps=self.max_steps)
            if self.max_steps
            else _("{steps} steps").format(steps=self.steps)
        ]
        if self.loss_first is not None and self.loss_last is not None:
            loss = _("loss {first} → {last}").format(
                first=f"{self.loss_first:.3g}", last=f"{self.loss_last:.3g}"
            )
            if self.loss_mean is not None:
                loss += " " + _("(mean {mean})").format(mean=f"{self.loss_mean:.3g}")
            parts.append(loss)
        if self.real_tokens_per_s is not None:
            rate = _("{rate} real tokens/s").format(rate=f"{self.real_tokens_per_s:,.0f}")
            if self.attempts > 1 and self.attempt_real_tokens_per_s is not None:
                rate += " " + _("(attempt {attempt}: {rate})").format(
                    attempt=self.attempts, rate=f"{self.attempt_real_tokens_per_s:,.0f}"
                )
            parts.append(rate)
        if self.wall_s is not None:
            parts.append(_("wall time {duration}").format(duration=duration(self.wall_s)))
        if self.gpus and self.gpu_hours is not None:
            parts.append(_("{hours} GPU-hours").format(hours=f"{self.gpu_hours:.2f}"))
        if self.output_dir:
            parts.append(_("model in {path}").format(path=self.output_dir))
        return ", ".join(parts)


def summarize_run(run_dir: Path, *, with_diagnosis: bool = False) -> RunSummary:
    """Read the run's figures (and, when asked, diagnose its log) into a ``RunSummary``."""
    path = run_dir / METRICS
    events = read_events(path) if path.is_file() else []
    fig = figures_of(events)
    attempt = fig.attempt
    ends = [e for e in events if isinstance(e, RunEnd)]
    top = None
    log = run_dir / LOG
    if with_diagnosis and log.is_file():
        top = diagnose_file(log).top
    return RunSummary(
        run_id=run_dir.name,
        steps=fig.step,
        max_steps=fig.max_steps,
        loss_first=fig.first_loss,
        loss_last=fig.last_loss,
        real_tokens_per_s=fig.real_tokens_per_s,
        output_dir=ends[-1].saved_to if ends else None,
        top_finding=top,
        loss_mean=fig.mean_loss,
        wall_s=fig.wall_s,
        gpus=fig.gpus,
        gpu_hours=fig.gpu_hours,
        attempts=max(1, len(fig.attempts)),
        attempt_real_tokens_per_s=attempt.real_tokens_per_s if attempt else None,
    )


_STOPPED = re.compile(
    r"stopped on request(?: \((?:exit code (-?\d+)|(recorded by 'trainwiz stop'))\))?"
)


def shown_message(message: str) -> str:
    """A status.json message in the user's language. The record keeps English (scripts and
    other sessions read it); the watcher's fixed texts are translated where they are shown."""
    found = _STOPPED.fullmatch(message or "")
    if found is None:
        return message
    if found.group(1) is not None:
        return _("stopped on request (exit code {code})").format(code=found.group(1))
    if found.group(2) is not None:
        return _("stopped on request (recorded by 'trainwiz stop')")
    return _("stopped on request")


class ProgressLine:
    """The CLI follower's progress line, from metrics.jsonl read incrementally (the monitor's
    reader and tracker, so the ETA is the monitor's: real tokens left / recent real tokens/s,
    or step-based, said so, for a run whose entry predates the real-token count)."""

    def __init__(self, run_dir: Path) -> None:
        self.follower = MetricsFollower(run_dir / METRICS)
        self.tracker = RunTracker(source="metrics")

    def line(self) -> str | None:
        while True:
            events = self.follower.poll()
            self.tracker.update(events)
            if not events or not self.follower.behind:
                break
        if self.tracker.last is None:
            return None
        s = self.tracker.summary()
        step = f"step {s.step}/{s.max_steps}" if s.max_steps else f"step {s.step}"
        parts = [step]
        if s.tokens_nonpad_per_s is not None:
            parts.append(f"{s.tokens_nonpad_per_s:,.0f} real tok/s")
        eta = f"ETA {duration(s.eta_s)}"
        if s.eta_basis == "real tokens" and s.real_tokens_left is not None:
            eta += f" ({s.real_tokens_left:,} real tokens left)"
        elif s.eta_basis == "steps":
            eta += " (step-based: the run's entry does not count real tokens)"
        parts.append(eta)
        return " · ".join(parts)


def run_progress(run_dir: Path) -> dict[str, Any]:
    """Where a run is, for a poll (`trainwiz attach RUN --json`, the MCP server's
    ``run_status``): the Monitor's tracker over the whole metrics.jsonl, so each figure is
    ``backend.monitor.figures``' one definition and the ETA is the Monitor's (real tokens left /
    the live pace; step-based, said so by ``eta_basis``, for an entry without the total)."""
    tracker = RunTracker(source="metrics")
    path = run_dir / METRICS
    if path.is_file():
        tracker.update(read_events(path))
    s = tracker.summary()
    return {
        "step": s.step,
        "max_steps": s.max_steps,
        "loss": s.last_loss,
        "mean_loss": s.mean_loss,
        "real_tokens_per_s": s.run_real_tokens_per_s,  # over the run's steps counted
        "pace_real_tokens_per_s": s.tokens_nonpad_per_s,  # the recent steps': what ETA divides
        "eta_s": s.eta_s,
        "eta_basis": s.eta_basis,
        "real_tokens_left": s.real_tokens_left,
        "wall_s": s.wall_s,
        "attempt": s.attempt,
        "finished": s.finished,
    }
