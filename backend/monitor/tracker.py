"""Folds metric events into what the monitor shows: a throughput summary and chart series.

The monitor's worker thread owns a ``RunTracker``; the UI only receives the immutable
``MetricsView`` it produces, so nothing is shared between threads.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from backend.monitor.figures import EtaBasis, Tally, eta, rate
from backend.monitor.metrics import (
    EvalRecord,
    MetricsEvent,
    RunEnd,
    RunStart,
    StepRecord,
    finite,
    real_mfu,
)
from backend.monitor.series import MinMaxSeries, Spike, SpikeDetector


@dataclass(frozen=True)
class ThroughputSummary:
    source: Literal["metrics", "log", "none"] = "none"
    step: int = 0
    max_steps: int | None = None
    epoch: float | None = None
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    tokens_nonpad_per_s: float | None = None
    samples_per_s: float | None = None
    mfu: float | None = None
    mfu_nonpad: float | None = None  # headline: real-token MFU (6N, the data's tokens only)
    eta_s: float | None = None
    # "real tokens": real tokens left / the live pace; "steps": steps left x step time (a run
    # whose entry predates real_tokens_total, or a log-only run). ``figures.eta``.
    eta_basis: EtaBasis | None = None
    real_tokens_left: int | None = None
    elapsed_s: float | None = None  # wall time, the running attempt's clock up to now
    last_loss: float | None = None
    mean_loss: float | None = None  # the figures below are ``backend.monitor.figures``'
    peak_mem_gib: tuple[float, ...] | None = None
    world_size: int | None = None
    finished: bool = False  # the last attempt's end line says the training finished
    ok: bool | None = None
    method: str | None = None  # "LoRA r=16: 39,936 trainable of ..." (None: a full fine-tune)
    first_loss: float | None = None  # the run's first finite loss (a final summary's "from")
    real_tokens_done: int | None = None  # real (non-pad) tokens of the steps counted
    run_real_tokens_per_s: float | None = None  # over the run's steps counted
    attempt_real_tokens_per_s: float | None = None  # over the last attempt's own steps
    attempt: int | None = None  # the last attempt's number
    attempts: int = 0
    wall_s: float | None = None  # wall time, every attempt up to its last step
    gpus: int = 0
    gpu_hours: float | None = None

    @property
    def progress(self) -> float | None:
        if not self.max_steps:
            return None
        return min(1.0, self.step / self.max_steps)


@dataclass(frozen=True)
class MetricsView:
    summary: ThroughputSummary
    loss: tuple[list[float], list[float]]
    lr: tuple[list[float], list[float]]
    grad_norm: tuple[list[float], list[float]]
    spikes: tuple[Spike, ...]
    spike_total: int
    points: int
    nonfinite_loss_steps: tuple[int, ...] = ()
    eval_loss: tuple[list[float], list[float]] = ([], [])  # (steps, eval losses), one per eval


@dataclass
class RunTracker:
    source: Literal["metrics", "log", "none"] = "none"
    window: int = 20
    cap: int = 512
    start: RunStart | None = field(default=None, init=False)
    end: RunEnd | None = field(default=None, init=False)  # the last attempt's, once written
    last: StepRecord | None = field(default=None, init=False)
    loss: MinMaxSeries = field(init=False)
    lr: MinMaxSeries = field(init=False)
    grad_norm: MinMaxSeries = field(init=False)
    spikes: SpikeDetector = field(default_factory=SpikeDetector, init=False)
    nonfinite_loss: deque[int] = field(default_factory=lambda: deque(maxlen=50), init=False)
    evals: dict[int, float] = field(default_factory=dict, init=False)  # step -> eval loss
    # Real tokens, step time, loss of the steps counted, per attempt and for the run: the one
    # definition of each figure (backend/monitor/figures.py), cut back where an attempt resumes.
    tally: Tally = field(default_factory=Tally, init=False)
    _recent: deque[StepRecord] = field(default_factory=deque, init=False, repr=False)
    _warm_step: int = field(default=1, init=False, repr=False)  # the attempt's first step

    def __post_init__(self) -> None:
        self._recent = deque(maxlen=self.window)
        self.loss = MinMaxSeries(self.cap)
        self.lr = MinMaxSeries(self.cap)
        self.grad_norm = MinMaxSeries(self.cap)

    def update(self, events: Iterable[MetricsEvent]) -> int:
        n = 0
        for ev in events:
            n += 1
            self.tally.update((ev,))
            if isinstance(ev, RunStart):
                self.start, self.end = ev, None  # an earlier attempt's end is not the run's
                self._cut(ev.resumed_from or 0)
                # Rates and the ETA are this attempt's: the last one's steps ran elsewhere,
                # at another pace, and its first step warms up again.
                self._recent.clear()
                self._warm_step = (ev.resumed_from or 0) + 1
            elif isinstance(ev, RunEnd):
                self.end = ev
            elif isinstance(ev, StepRecord):
                self._step(ev)
            elif isinstance(ev, EvalRecord) and math.isfinite(ev.eval_loss):
                self.evals[ev.step] = ev.eval_loss  # a resumed attempt's eval replaces the old
        return n

    def _cut(self, step: int) -> None:
        """The chart forgets the steps a resumed attempt replaces (they are drawn once)."""
        for series in (self.loss, self.lr, self.grad_norm):
            series.truncate(step)
        self.spikes.forget_after(step)
        kept = [s for s in self.nonfinite_loss if s <= step]
        self.nonfinite_loss = deque(kept, maxlen=self.nonfinite_loss.maxlen)
        self.evals = {k: v for k, v in self.evals.items() if k <= step}

    def _step(self, rec: StepRecord) -> None:
        self.last = rec
        self._recent.append(rec)
        if rec.loss is not None:
            if math.isfinite(rec.loss):
                self.loss.append(rec.step, rec.loss)
            else:
                self.nonfinite_loss.append(rec.step)
        if finite(rec.learning_rate):
            self.lr.append(rec.step, rec.learning_rate)  # type: ignore[arg-type]
        if rec.grad_norm is not None:
            self.spikes.add(rec.step, rec.grad_norm)
            if math.isfinite(rec.grad_norm):
                self.grad_norm.append(rec.step, rec.grad_norm)

    def summary(self, now: float | None = None) -> ThroughputSummary:
        """The panel's figures; ``now`` (default: the clock) runs a live attempt's wall time."""
        last = self.last
        fig = self.tally.figures()
        if last is None:
            return ThroughputSummary(
                self.source,
                finished=fig.finished,
                ok=self.end.ok if self.end else None,
                samples_per_s=self.end.samples_per_s if self.end else None,
                world_size=self.start.world_size if self.start else None,
                method=method_line(self.start),
                elapsed_s=fig.wall_s,
                wall_s=fig.wall_s,
            )
        recent = list(self._recent)
        # The first optimizer step carries warm-up (allocator, NCCL init): leave it out of the
        # live pace once there is anything else to average.
        steady = [r for r in recent if r.step > self._warm_step] or recent
        times = [r.step_time_s for r in steady if finite(r.step_time_s)]
        step_time = statistics.median(times) if times else None  # type: ignore[type-var]
        tokens_per_s = rate(steady, "tokens") or _median(steady, "tokens_per_s")
        nonpad = rate(steady) or _median(steady, "tokens_nonpad_per_s")
        samples = rate(steady, "samples") or _median(steady, "samples_per_s")
        if samples is None and self.end is not None:
            samples = self.end.samples_per_s
        mfu = _median(steady, "mfu")
        st = self.start
        if mfu is None and tokens_per_s and st and st.peak_flops and st.flops_per_token:
            per_gpu = tokens_per_s / (st.world_size or 1)
            mfu = per_gpu * st.flops_per_token / st.peak_flops
        mfu_nonpad = _median(steady, "mfu_nonpad") or real_mfu(nonpad, st)
        total = st.real_tokens_total if st else None
        eta_s, basis, left = eta(fig, nonpad, total, step_time)
        attempt = fig.attempt
        return ThroughputSummary(
            source=self.source,
            step=last.step,
            max_steps=last.max_steps,
            epoch=last.epoch,
            step_time_s=step_time,
            tokens_per_s=tokens_per_s,
            tokens_nonpad_per_s=nonpad,
            samples_per_s=samples,
            mfu=mfu,
            mfu_nonpad=mfu_nonpad,
            eta_s=eta_s,
            eta_basis=basis,
            real_tokens_left=left,
            elapsed_s=self.tally.figures(time.time() if now is None else now).wall_s,
            last_loss=fig.last_loss,
            mean_loss=fig.mean_loss,
            peak_mem_gib=last.peak_mem_gib,
            world_size=self.start.world_size if self.start else None,
            finished=fig.finished,
            ok=self.end.ok if self.end else None,
            method=method_line(st),
            first_loss=fig.first_loss,
            real_tokens_done=fig.real_tokens,
            run_real_tokens_per_s=fig.real_tokens_per_s,
            attempt_real_tokens_per_s=attempt.real_tokens_per_s if attempt else None,
            attempt=attempt.attempt if attempt else None,
            attempts=len(fig.attempts),
            wall_s=fig.wall_s,
            gpus=fig.gpus,
            gpu_hours=fig.gpu_hours,
        )

    def view(self, width: int | None = None, now: float | None = None) -> MetricsView:
        return MetricsView(
            summary=self.summary(now),
            loss=self.loss.points(width),
            lr=self.lr.points(width),
            grad_norm=self.grad_norm.points(width),
            spikes=tuple(self.spikes.spikes),
            spike_total=self.spikes.total,
            points=self.tally.figures().points,  # each step once, as the chart draws
            nonfinite_loss_steps=tuple(self.nonfinite_loss),
            eval_loss=(
                [float(k) for k in sorted(self.evals)],
                [self.evals[k] for k in sorted(self.evals)],
            ),
        )


def method_line(start: RunStart | None) -> str | None:
    """What an adapter run trains, for the monitor: a full fine-tune needs no line."""
    if start is None or start.method not in ("lora", "qlora"):
        return None
    name = "QLoRA" if start.method == "qlora" else "LoRA"
    head = f"{name} r={start.lora_r}" if start.lora_r else name
    if start.trainable_params is None:
        return head
    line = f"{head}: {start.trainable_params:,} trainable"
    if start.n_params:
        line += f" of {start.n_params:,} ({100 * start.trainable_params / start.n_params:.2f} %)"
    return line


def _median(recs: list[StepRecord], attr: str) -> float | None:
    vals = [getattr(r, attr) for r in recs if finite(getattr(r, attr))]
    return statistics.median(vals) if vals else None
