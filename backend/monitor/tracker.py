"""Folds metric events into what the monitor shows: a throughput summary and chart series.

The monitor's worker thread owns a ``RunTracker``; the UI only receives the immutable
``MetricsView`` it produces, so nothing is shared between threads.
"""

from __future__ import annotations

import math
import statistics
import time
from array import array
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

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
    # "real tokens": real tokens left / recent real tokens/s; "steps": steps left x step time
    # (a run whose entry predates real_tokens_total, or a log-only run).
    eta_basis: Literal["real tokens", "steps"] | None = None
    real_tokens_left: int | None = None
    elapsed_s: float | None = None
    last_loss: float | None = None
    mean_loss: float | None = None  # over the run's steps, each once (``metrics.mean_loss``)
    peak_mem_gib: tuple[float, ...] | None = None
    world_size: int | None = None
    finished: bool = False
    ok: bool | None = None
    method: str | None = None  # "LoRA r=16: 39,936 trainable of ..." (None: a full fine-tune)
    first_loss: float | None = None  # the run's first finite loss (a final summary's "from")
    real_tokens_done: int | None = None  # real (non-pad) tokens trained, repeats counted once

    @property
    def mean_real_tokens_per_s(self) -> float | None:
        """Real tokens trained over the wall time: what the whole run averaged."""
        if self.real_tokens_done is None or not self.elapsed_s:
            return None
        return self.real_tokens_done / self.elapsed_s

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
    end: RunEnd | None = field(default=None, init=False)
    last: StepRecord | None = field(default=None, init=False)
    first_time: float | None = field(default=None, init=False)
    first_loss: float | None = field(default=None, init=False)
    loss: MinMaxSeries = field(init=False)
    lr: MinMaxSeries = field(init=False)
    grad_norm: MinMaxSeries = field(init=False)
    spikes: SpikeDetector = field(default_factory=SpikeDetector, init=False)
    nonfinite_loss: deque[int] = field(default_factory=lambda: deque(maxlen=50), init=False)
    evals: dict[int, float] = field(default_factory=dict, init=False)  # step -> eval loss
    _recent: deque[StepRecord] = field(default_factory=deque, init=False, repr=False)
    # Real tokens done up to each step (index step-1): 8 bytes a step, truncated where an
    # attempt restarts (its checkpoint step, or 0), so repeated steps are counted once.
    _real_done: array[int] = field(default_factory=lambda: array("q"), init=False, repr=False)
    # Loss summed up to each step (index step-1), a logged loss covering the steps since the
    # previous log; truncated like _real_done, so the mean is ``metrics.mean_loss``'s.
    _loss_done: array[float] = field(default_factory=lambda: array("d"), init=False, repr=False)
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
            if isinstance(ev, RunStart):
                self.start = ev
                del self._real_done[ev.resumed_from or 0 :]
                del self._loss_done[ev.resumed_from or 0 :]
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

    def _count_real(self, rec: StepRecord) -> None:
        done = self._real_done
        if rec.step < 1 or rec.tokens_nonpad is None:
            return
        del done[rec.step - 1 :]  # a step seen again (an attempt without a start line)
        before = done[-1] if done else 0
        while len(done) < rec.step:  # a gap (lines lost): the missing steps count like this one
            before += rec.tokens_nonpad
            done.append(before)

    def _sum_loss(self, rec: StepRecord) -> None:
        done = self._loss_done
        if rec.step < 1 or rec.loss is None or not math.isfinite(rec.loss):
            return
        del done[rec.step - 1 :]
        before = done[-1] if done else 0.0
        while len(done) < rec.step:
            before += rec.loss
            done.append(before)

    def _step(self, rec: StepRecord) -> None:
        self._count_real(rec)
        self._sum_loss(rec)
        self.last = rec
        if rec.time is not None and self.first_time is None:
            self.first_time = rec.time - (rec.step_time_s or 0.0)
        self._recent.append(rec)
        if rec.loss is not None:
            if math.isfinite(rec.loss):
                if self.first_loss is None:
                    self.first_loss = rec.loss
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
        last = self.last
        finished = self.end is not None
        if last is None:
            return ThroughputSummary(
                self.source,
                finished=finished,
                ok=self.end.ok if self.end else None,
                samples_per_s=self.end.samples_per_s if self.end else None,
                world_size=self.start.world_size if self.start else None,
                method=method_line(self.start),
            )
        recent = list(self._recent)
        # The first optimizer step carries warm-up (allocator, NCCL init): leave it out once
        # there is anything else to average.
        steady = [r for r in recent if r.step > self._warm_step] or recent
        times = [r.step_time_s for r in steady if finite(r.step_time_s)]
        step_time = statistics.median(times) if times else None  # type: ignore[type-var]
        tokens_per_s = _rate(steady, "tokens") or _median(steady, "tokens_per_s")
        nonpad = _rate(steady, "tokens_nonpad") or _median(steady, "tokens_nonpad_per_s")
        samples = _rate(steady, "samples") or _median(steady, "samples_per_s")
        if samples is None and self.end is not None:
            samples = self.end.samples_per_s
        mfu = _median(steady, "mfu")
        st = self.start
        if mfu is None and tokens_per_s and st and st.peak_flops and st.flops_per_token:
            per_gpu = tokens_per_s / (st.world_size or 1)
            mfu = per_gpu * st.flops_per_token / st.peak_flops
        mfu_nonpad = _median(steady, "mfu_nonpad") or real_mfu(nonpad, st)
        eta, basis, left = self._eta(last, finished, nonpad, step_time)
        elapsed = None
        if self.end is not None and self.end.train_runtime is not None:
            elapsed = self.end.train_runtime
        elif self.first_time is not None:
            end_t = last.time if finished and last.time else (now or time.time())
            elapsed = max(0.0, end_t - self.first_time)
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
            eta_s=eta,
            eta_basis=basis,
            real_tokens_left=left,
            elapsed_s=elapsed,
            last_loss=self.loss.last[1] if self.loss.last else None,
            mean_loss=self._loss_done[-1] / len(self._loss_done) if self._loss_done else None,
            peak_mem_gib=last.peak_mem_gib,
            world_size=self.start.world_size if self.start else None,
            finished=finished,
            ok=self.end.ok if self.end else None,
            method=method_line(st),
            first_loss=self.first_loss,
            real_tokens_done=self._real_done[-1] if self._real_done else None,
        )

    def _eta(
        self, last: StepRecord, finished: bool, real_rate: float | None, step_time: float | None
    ) -> tuple[float | None, Literal["real tokens", "steps"] | None, int | None]:
        """(seconds, basis, real tokens left): from real tokens left when the start line says
        how many the run has, else from steps left (the word tells the user which)."""
        if finished:
            return 0.0, None, 0
        total = self.start.real_tokens_total if self.start else None
        if total and real_rate and self._real_done:
            left = max(0, total - self._real_done[-1])
            return left / real_rate, "real tokens", left
        if last.max_steps and step_time:
            return max(0, last.max_steps - last.step) * step_time, "steps", None
        return None, None, None

    def view(self, width: int | None = None, now: float | None = None) -> MetricsView:
        return MetricsView(
            summary=self.summary(now),
            loss=self.loss.points(width),
            lr=self.lr.points(width),
            grad_norm=self.grad_norm.points(width),
            spikes=tuple(self.spikes.spikes),
            spike_total=self.spikes.total,
            points=self.loss.count,
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


def _rate(recs: list[StepRecord], attr: str) -> float | None:
    """Sum of a per-step count over the sum of step times: a rate weighted by real time."""
    total = 0.0
    secs = 0.0
    for r in recs:
        v = getattr(r, attr)
        if v is None or not finite(r.step_time_s):
            continue
        total += v
        secs += r.step_time_s  # type: ignore[operator]
    return total / secs if secs > 0 else None


def _median(recs: list[StepRecord], attr: str) -> float | None:
    vals = [getattr(r, attr) for r in recs if finite(getattr(r, attr))]
    return statistics.median(vals) if vals else None
