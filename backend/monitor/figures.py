"""A run's figures, each defined once: real tokens/s, wall time, GPU-hours, mean train loss, ETA.

Every view reads them from here: the launch/resume summary line, the Monitor, ``trainwiz runs``,
``runs compare``, the model card and the end-of-run notification. Before this module each view
had its own arithmetic, and one run showed three real tokens/s (the summary line left out step 1,
compare divided by summed step times, the Monitor by the trainer's runtime) and two wall times.
The definitions (docs/run-format.md, "Figures of a run"):

- **Steps counted**: the run's continued series, each step once. A resumed attempt starts over
  at its checkpoint, so the steps the earlier attempt ran past it are replaced, not added.
- **Real tokens/s** = the sum of ``tokens_nonpad`` over a set of steps / the sum of their
  ``step_time_s``. The step time is the one time that belongs to a step (the entry restarts the
  clock after each log, eval and checkpoint save), so the figure is the training's pace: it does
  not drop because a run evaluates or saves more often, it is what the planner predicts and the
  probes measure (so a run compares with its plan), and it is the same formula over the run's
  steps counted (the run's figure), an attempt's own steps (the attempt's) and the running
  attempt's recent steps (the live pace the ETA divides by).
- **Wall time** = the sum over attempts of the time from the attempt's first step's start
  (``time - step_time_s``) to its last step's end (``time``): evals and checkpoint saves between
  steps count, replayed steps count (they took the time), but not the setup before the first step
  (environment, download, model load: they depend on caches, not on the training), the final save,
  nor the gaps between attempts (a resume the next morning adds no night). A record without step
  clocks (a log-only run) takes the trainer's ``train_runtime``.
- **GPU-hours** = the sum over attempts of the attempt's GPUs (its ``start`` line's world size when
  it names a GPU, else 0) x its wall time / 3600.
- **Mean train loss** = the mean over the steps counted, a logged loss (the mean since the previous
  log) weighing the steps it covers; the Trainer's own ``train_loss`` does not (after a resume it
  divides the last attempt's sum by all the run's steps).
- **ETA** = real tokens left (the start line's ``real_tokens_total`` minus the real tokens of the
  steps counted) / the live pace; steps left x step time for an entry without the total; 0 once
  the last attempt's end line says the training finished, unknown while no attempt trains.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from backend.monitor.metrics import MetricsEvent, RunEnd, RunStart, StepRecord, read_events
from backend.rundir import METRICS

FIGURES_CACHE = "figures.json"  # a run's figures for `trainwiz runs`, keyed by metrics.jsonl's size
EtaBasis = Literal["real tokens", "steps"]


def step_seconds(rec: StepRecord) -> float | None:
    """A step's own time, when its line has a usable one."""
    t = rec.step_time_s
    return t if t is not None and math.isfinite(t) and t > 0 else None


def rate(steps: Iterable[StepRecord], attr: str = "tokens_nonpad") -> float | None:
    """Real tokens/s over ``steps`` (the definition above); the same formula gives padded
    tokens/s (``tokens``) and samples/s (``samples``). Only steps with a count and a time count."""
    amount, seconds = 0.0, 0.0
    for rec in steps:
        value, spent = getattr(rec, attr), step_seconds(rec)
        if value is not None and spent is not None:
            amount, seconds = amount + value, seconds + spent
    return amount / seconds if seconds > 0 else None


@dataclass(frozen=True)
class AttemptFigures:
    attempt: int
    resumed_from: int | None
    steps: int  # step lines this attempt wrote (its replayed steps included)
    real_tokens_per_s: float | None  # over this attempt's own steps
    wall_s: float | None
    gpus: int
    gpu_hours: float | None
    ended: bool  # it wrote its end line
    ok: bool | None


@dataclass(frozen=True)
class Figures:
    step: int = 0  # the last step counted
    max_steps: int | None = None
    points: int = 0  # logged losses counted (the loss chart's points)
    real_tokens: int | None = None  # real tokens of the steps counted (a lost line: the next's)
    real_tokens_per_s: float | None = None  # over the steps counted
    wall_s: float | None = None
    gpus: int = 0  # the last attempt's
    gpu_hours: float | None = None
    mean_loss: float | None = None
    first_loss: float | None = None
    last_loss: float | None = None
    attempts: tuple[AttemptFigures, ...] = ()
    ended: bool = False  # the last attempt wrote its end line
    finished: bool = False  # ... and it says the training finished

    @property
    def attempt(self) -> AttemptFigures | None:
        """The last attempt (the running one, while the run trains)."""
        return self.attempts[-1] if self.attempts else None


@dataclass
class _Attempt:
    number: int
    resumed_from: int | None = None
    gpus: int = 0
    steps: int = 0
    tokens: float = 0.0  # tokens_nonpad of the steps with a time
    seconds: float = 0.0
    first_start: float | None = None
    last_end: float | None = None
    clocked: bool = True  # every step line carried its clock
    end: RunEnd | None = None

    def add(self, rec: StepRecord) -> None:
        self.steps += 1
        spent = step_seconds(rec)
        if rec.tokens_nonpad is not None and spent is not None:
            self.tokens, self.seconds = self.tokens + rec.tokens_nonpad, self.seconds + spent
        if rec.time is None or not math.isfinite(rec.time):
            self.clocked = False
            return
        if self.first_start is None:
            self.first_start = rec.time - (spent or 0.0)
        self.last_end = rec.time

    def wall_s(self, now: float | None) -> float | None:
        if self.steps and self.clocked and self.first_start is not None:
            stop = now if now is not None and self.end is None else self.last_end
            return max(0.0, (stop or self.first_start) - self.first_start)
        if self.steps and not self.clocked and self.end is not None:
            return self.end.train_runtime or None  # a log-only run: the trainer's clock
        return None

    def frozen(self, now: float | None) -> AttemptFigures:
        wall = self.wall_s(now)
        return AttemptFigures(
            attempt=self.number,
            resumed_from=self.resumed_from,
            steps=self.steps,
            real_tokens_per_s=self.tokens / self.seconds if self.seconds > 0 else None,
            wall_s=wall,
            gpus=self.gpus,
            gpu_hours=None if wall is None else self.gpus * wall / 3600,
            ended=self.end is not None,
            ok=self.end.ok if self.end is not None else None,
        )


class Tally:
    """Folds metrics events into ``Figures``, incrementally: the Monitor feeds it as the file
    grows, the batch readers all at once, so a live figure and a final one are the same sum.

    Per step counted it keeps 24 bytes (real tokens, timed tokens, step seconds, summed up to
    the step), per logged loss 24 more; a resume cuts them back to its checkpoint."""

    def __init__(self) -> None:
        self._real = array("q")  # real tokens up to step i+1 (a lost line counts like the next)
        self._timed = array("d")  # tokens_nonpad of the steps with a time, up to step i+1
        self._secs = array("d")  # their step seconds
        self._loss_step = array("q")  # each logged loss kept: its step,
        self._loss = array("d")  # the loss,
        self._loss_sum = array("d")  # and the losses summed over steps 1..step
        self._attempts: list[_Attempt] = []
        self._has_tokens = False
        self.step = 0
        self.max_steps: int | None = None

    def update(self, events: Iterable[MetricsEvent]) -> None:
        for ev in events:
            if isinstance(ev, RunStart):
                self.cut(ev.resumed_from or 0)  # a new attempt goes on from its checkpoint
                gpus = (ev.world_size or 1) if ev.gpu_name else 0
                number = ev.attempt or len(self._attempts) + 1
                self._attempts.append(_Attempt(number, ev.resumed_from, gpus))
            elif isinstance(ev, StepRecord):
                self._add(ev)
            elif isinstance(ev, RunEnd):
                if not self._attempts:
                    self._attempts.append(_Attempt(ev.attempt or 1))
                self._attempts[-1].end = ev

    def cut(self, step: int) -> None:
        """Forget the steps after ``step``: a later attempt replaces them."""
        del self._real[step:]
        del self._timed[step:]
        del self._secs[step:]
        keep = len(self._loss_step)
        while keep and self._loss_step[keep - 1] > step:
            keep -= 1
        del self._loss_step[keep:]
        del self._loss[keep:]
        del self._loss_sum[keep:]
        self.step = min(self.step, step)

    def _add(self, rec: StepRecord) -> None:
        current = self._attempts[-1].number if self._attempts else None
        if current is None or (rec.attempt is not None and rec.attempt != current):
            self._attempts.append(_Attempt(rec.attempt or len(self._attempts) + 1))
        self._attempts[-1].add(rec)
        if rec.step < 1:
            return
        self.cut(rec.step - 1)  # a step seen again (an attempt that wrote no start line)
        self.step, self.max_steps = rec.step, rec.max_steps or self.max_steps
        real = rec.tokens_nonpad or 0
        self._has_tokens = self._has_tokens or rec.tokens_nonpad is not None
        spent = step_seconds(rec)
        timed = spent is not None and rec.tokens_nonpad is not None
        before = self._real[-1] if self._real else 0
        while len(self._real) < rec.step:  # lines lost in between: real tokens like this one
            before += real
            self._real.append(before)
            self._timed.append(self._timed[-1] if self._timed else 0.0)
            self._secs.append(self._secs[-1] if self._secs else 0.0)
        if timed:
            self._timed[-1] += real
            self._secs[-1] += spent or 0.0
        if rec.loss is not None and math.isfinite(rec.loss):
            previous = self._loss_step[-1] if self._loss_step else 0
            total = self._loss_sum[-1] if self._loss_sum else 0.0
            self._loss_step.append(rec.step)
            self._loss.append(rec.loss)
            self._loss_sum.append(total + rec.loss * (rec.step - previous))

    def figures(self, now: float | None = None) -> Figures:
        """The figures so far; ``now`` runs the clock of a last attempt that has not ended
        (the Monitor's "ran"), else every attempt stops at its last step."""
        attempts = tuple(
            a.frozen(now if i == len(self._attempts) - 1 else None)
            for i, a in enumerate(self._attempts)
        )
        walls = [a.wall_s for a in attempts if a.wall_s is not None]
        hours = [a.gpu_hours for a in attempts if a.gpu_hours is not None]
        last = self._attempts[-1] if self._attempts else None
        secs = self._secs[-1] if self._secs else 0.0
        return Figures(
            step=self.step,
            max_steps=self.max_steps,
            points=len(self._loss),
            real_tokens=self._real[-1] if self._real and self._has_tokens else None,
            real_tokens_per_s=self._timed[-1] / secs if secs > 0 else None,
            wall_s=sum(walls) if walls else None,
            gpus=last.gpus if last else 0,
            gpu_hours=sum(hours) if hours else None,
            mean_loss=self._loss_sum[-1] / self._loss_step[-1] if self._loss_step else None,
            first_loss=self._loss[0] if self._loss else None,
            last_loss=self._loss[-1] if self._loss else None,
            attempts=attempts,
            ended=last is not None and last.end is not None,
            finished=last is not None and last.end is not None and last.end.ok is True,
        )


def figures_of(events: Iterable[MetricsEvent], now: float | None = None) -> Figures:
    tally = Tally()
    tally.update(events)
    return tally.figures(now)


def mean_loss(steps: Iterable[StepRecord]) -> float | None:
    """The mean train loss of a series of steps (the definition above)."""
    return figures_of(steps).mean_loss


def eta(
    figures: Figures, pace: float | None, real_total: int | None, step_time: float | None
) -> tuple[float | None, EtaBasis | None, int | None]:
    """(seconds, basis, real tokens left): real tokens left / the live pace when the start line
    says how many the run has, else steps left x step time (the basis tells the user which)."""
    if figures.finished:
        return 0.0, None, 0
    if figures.ended:  # the last attempt failed: nothing trains until the next one starts
        return None, None, None
    if real_total and pace and figures.real_tokens is not None:
        left = max(0, real_total - figures.real_tokens)
        return left / pace, "real tokens", left
    if figures.max_steps and step_time:
        return max(0, figures.max_steps - figures.step) * step_time, "steps", None
    return None, None, None


def read_figures(run_dir: Path) -> Figures:
    """A run's figures from its metrics.jsonl (empty figures without one)."""
    path = run_dir / METRICS
    return figures_of(read_events(path)) if path.is_file() else Figures()


def cached_figures(run_dir: Path) -> Figures:
    """``read_figures``, kept in the run's figures.json while metrics.jsonl keeps its size and
    time: ``trainwiz runs`` lists every run, and a long run's file takes seconds to read."""
    try:
        stat = (run_dir / METRICS).stat()
    except OSError:
        return Figures()
    key = [stat.st_size, stat.st_mtime_ns]
    try:
        stored = json.loads((run_dir / FIGURES_CACHE).read_text(encoding="utf-8"))
        if stored.get("metrics") == key:
            data = stored["figures"]
            data["attempts"] = tuple(AttemptFigures(**a) for a in data["attempts"])
            return Figures(**data)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    found = read_figures(run_dir)
    record = {"metrics": key, "figures": dataclasses.asdict(found)}
    _store(run_dir / FIGURES_CACHE, json.dumps(record) + "\n")
    return found


def _store(path: Path, text: str) -> None:
    """Temp file (0600) + rename, and nothing more: a cache never releases the run's disk-full
    reserve (atomicfile's records do), and a read-only or full run dir just goes uncached."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
