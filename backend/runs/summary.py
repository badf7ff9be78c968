"""A run in one line: what a finished or failed launch prints last, and what `runs` can show.

The numbers come from the run's own files (metrics.jsonl through the monitor's reader, the log
through the diagnosis classifier), so the summary never says more than the record holds. Real
tokens/s counts the tokens the data really has (no padding), the figure a user compares runs by.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from backend.diagnosis import diagnose_file
from backend.diagnosis.model import Finding
from backend.i18n import _
from backend.monitor.metrics import (
    MetricsFollower,
    RunEnd,
    RunStart,
    StepRecord,
    continued_series,
    finite,
    mean_loss,
)
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
    real_tokens_per_s: float | None
    output_dir: str | None
    top_finding: Finding | None = None
    loss_mean: float | None = None  # over every step of every attempt, each counted once

    def line(self) -> str:
        """'150/150 steps, loss 6.29 → 1.87, 1,234 real tokens/s, model in DIR'."""
        parts = [
            f"{self.steps}/{self.max_steps} steps" if self.max_steps else f"{self.steps} steps"
        ]
        if self.loss_first is not None and self.loss_last is not None:
            loss = f"loss {self.loss_first:.3g} → {self.loss_last:.3g}"
            if self.loss_mean is not None:
                loss += f" (mean {self.loss_mean:.3g})"
            parts.append(loss)
        if self.real_tokens_per_s is not None:
            parts.append(f"{self.real_tokens_per_s:,.0f} real tokens/s")
        if self.output_dir:
            parts.append(f"model in {self.output_dir}")
        return ", ".join(parts)


def _real_tokens_per_s(steps: list[StepRecord]) -> float | None:
    """Non-pad tokens over step time, summed over the steady steps (the first step warms up)."""
    timed = [s for s in steps if s.tokens_nonpad and s.step_time_s and s.step_time_s > 0]
    if len(timed) > 1:
        timed = timed[1:]
    tokens = sum(s.tokens_nonpad or 0 for s in timed)
    seconds = sum(s.step_time_s or 0.0 for s in timed)
    if tokens and seconds > 0:
        return tokens / seconds
    rates = [s.tokens_nonpad_per_s for s in steps if finite(s.tokens_nonpad_per_s)]
    return rates[-1] if rates else None


def summarize_run(run_dir: Path, *, with_diagnosis: bool = False) -> RunSummary:
    """Read the run's metrics (and, when asked, diagnose its log) into a ``RunSummary``."""
    follower = MetricsFollower(run_dir / METRICS)
    events: list[RunStart | StepRecord | RunEnd] = []
    end: RunEnd | None = None
    while True:
        batch = follower.poll()
        if not batch and not follower.behind:
            break
        for event in batch:
            if isinstance(event, (RunStart, StepRecord)):
                events.append(event)
            elif isinstance(event, RunEnd):
                end = event
    steps, _evals = continued_series(list(events))  # a resumed attempt's steps replace the old
    attempt = [s for s in steps if s.attempt == steps[-1].attempt] if steps else []
    losses = [s.loss for s in steps if finite(s.loss)]
    top = None
    log = run_dir / LOG
    if with_diagnosis and log.is_file():
        top = diagnose_file(log).top
    return RunSummary(
        run_id=run_dir.name,
        steps=steps[-1].step if steps else 0,
        max_steps=steps[-1].max_steps if steps else None,
        loss_first=losses[0] if losses else None,
        loss_last=losses[-1] if losses else None,
        real_tokens_per_s=_real_tokens_per_s(attempt),  # the last attempt's own pace
        output_dir=end.saved_to if end is not None else None,
        top_finding=top,
        loss_mean=mean_loss(steps),
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
