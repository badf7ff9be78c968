"""Training metrics from metrics.jsonl (the entry's contract) or, failing that, the HF Trainer log.

Both paths produce the same ``StepRecord``/``RunStart``/``RunEnd`` events, so the throughput
meter and the loss chart do not care where the numbers came from.
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.monitor.logfollow import split_segments


@dataclass(frozen=True)
class RunStart:
    world_size: int | None = None
    n_params: int | None = None
    flops_per_token: float | None = None
    peak_flops: float | None = None
    gpu_name: str | None = None
    attn_implementation: str | None = None
    flops_6n: float | None = None  # 6 x non-embedding params: real-token MFU's FLOPs per token
    packing: int | None = None  # packed row budget, None when FastChat pads
    attempt: int | None = None
    resumed_from: int | None = None  # the checkpoint step a resumed attempt started from
    method: str | None = None  # full | lora | qlora (newer entries; None before)
    trainable_params: int | None = None  # LoRA/QLoRA: the adapters' parameters
    lora_r: int | None = None
    # The real-token ETA's total (entries that count real tokens; None before: step-based ETA).
    real_tokens_total: int | None = None
    real_tokens_per_epoch: int | None = None


@dataclass(frozen=True)
class StepRecord:
    step: int
    max_steps: int | None = None
    epoch: float | None = None
    loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    step_time_s: float | None = None
    tokens: int | None = None
    tokens_nonpad: int | None = None
    samples: int | None = None
    tokens_per_s: float | None = None
    tokens_nonpad_per_s: float | None = None
    samples_per_s: float | None = None
    mfu: float | None = None
    peak_mem_gib: tuple[float, ...] | None = None
    time: float | None = None
    mfu_nonpad: float | None = None  # real (non-pad) tokens/s per GPU x 6N / peak

    attempt: int | None = None

    @property
    def real_tokens_per_s(self) -> float | None:
        """The headline: the data's own tokens per second (padding and row filler excluded)."""
        return self.tokens_nonpad_per_s


@dataclass(frozen=True)
class EvalRecord:
    """One evaluation (``kind: eval`` line): the eval loss at an optimizer step."""

    step: int
    eval_loss: float
    attempt: int | None = None
    time: float | None = None


@dataclass(frozen=True)
class RunEnd:
    train_runtime: float | None = None
    ok: bool | None = None
    saved_to: str | None = None
    train_loss: float | None = None
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    eval_loss: float | None = None
    best_eval_loss: float | None = None
    attempt: int | None = None


MetricsEvent = RunStart | StepRecord | EvalRecord | RunEnd


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def event_from_json(obj: dict[str, Any]) -> MetricsEvent | None:
    kind = obj.get("kind")
    if kind == "start":
        return RunStart(
            _int(obj.get("world_size")),
            _int(obj.get("n_params")),
            _num(obj.get("flops_per_token")),
            _num(obj.get("peak_flops")),
            obj.get("gpu_name"),
            obj.get("attn_implementation"),
            _num(obj.get("flops_6n")),
            _int(obj.get("packing")),
            _int(obj.get("attempt")),
            _int(obj.get("resumed_from")),
            obj.get("method") if isinstance(obj.get("method"), str) else None,
            _int(obj.get("trainable_params")),
            _int(obj.get("lora_r")),
            _int(obj.get("real_tokens_total")),
            _int(obj.get("real_tokens_per_epoch")),
        )
    if kind == "end":
        return RunEnd(
            _num(obj.get("train_runtime")),
            obj.get("ok"),
            obj.get("saved_to"),
            _num(obj.get("train_loss")),
            eval_loss=_num(obj.get("eval_loss")),
            best_eval_loss=_num(obj.get("best_eval")),
            attempt=_int(obj.get("attempt")),
        )
    if (
        kind == "eval"
        and _int(obj.get("step")) is not None
        and _num(obj.get("eval_loss")) is not None
    ):
        return EvalRecord(
            int(obj["step"]),
            float(obj["eval_loss"]),
            _int(obj.get("attempt")),
            _num(obj.get("time")),
        )
    if kind == "step" and _int(obj.get("step")) is not None:
        peak = obj.get("peak_mem_gib")
        return StepRecord(
            step=int(obj["step"]),
            max_steps=_int(obj.get("max_steps")),
            epoch=_num(obj.get("epoch")),
            loss=_num(obj.get("loss")),
            learning_rate=_num(obj.get("learning_rate")),
            grad_norm=_num(obj.get("grad_norm")),
            step_time_s=_num(obj.get("step_time_s")),
            tokens=_int(obj.get("tokens")),
            tokens_nonpad=_int(obj.get("tokens_nonpad")),
            samples=_int(obj.get("samples")),
            tokens_per_s=_num(obj.get("tokens_per_s")),
            tokens_nonpad_per_s=_num(obj.get("tokens_nonpad_per_s")),
            samples_per_s=_num(obj.get("samples_per_s")),
            mfu=_num(obj.get("mfu")),
            peak_mem_gib=tuple(float(x) for x in peak if _num(x) is not None)
            if isinstance(peak, list)
            else None,
            time=_num(obj.get("time")),
            mfu_nonpad=_num(obj.get("mfu_nonpad")),
            attempt=_int(obj.get("attempt")),
        )
    return None


def continued_series(events: list[MetricsEvent]) -> tuple[list[StepRecord], list[EvalRecord]]:
    """Steps and evals of a run across its attempts, one per step, in step order.

    A resumed attempt restarts at its checkpoint's step, so the steps the failed attempt ran past
    that checkpoint appear twice in metrics.jsonl; the later attempt's record is the one the
    model kept, so it wins. The result is the continuous series a chart draws."""
    steps: dict[int, StepRecord] = {}
    evals: dict[int, EvalRecord] = {}
    for ev in events:
        if isinstance(ev, StepRecord):
            steps[ev.step] = ev
        elif isinstance(ev, EvalRecord):
            evals[ev.step] = ev
        elif isinstance(ev, RunStart) and ev.resumed_from is not None:
            # Everything after the checkpoint belongs to the attempt that failed: drop it.
            steps = {k: v for k, v in steps.items() if k <= ev.resumed_from}
            evals = {k: v for k, v in evals.items() if k <= ev.resumed_from}
    return [steps[k] for k in sorted(steps)], [evals[k] for k in sorted(evals)]


def read_events(path: Path) -> list[MetricsEvent]:
    """Every event of a metrics file, read to its end."""
    follower = MetricsFollower(path)
    events: list[MetricsEvent] = []
    while True:
        batch = follower.poll()
        events.extend(batch)
        if not batch and not follower.behind:
            return events


@dataclass
class MetricsFollower:
    """Reads new complete lines of metrics.jsonl on each ``poll()``.

    A partial last line (the writer is mid-flush) stays buffered until its newline arrives; a file
    that shrank (a new run reusing the path) is re-read from the start and ``resets`` counts it.
    """

    path: Path
    max_read: int = 4 << 20
    bad_lines: int = field(default=0, init=False)
    resets: int = field(default=0, init=False)
    _offset: int = field(default=0, init=False, repr=False)
    _partial: bytes = field(default=b"", init=False, repr=False)

    @property
    def behind(self) -> bool:
        """True when the file holds more than the last poll read (call poll again now)."""
        try:
            return self.path.stat().st_size > self._offset
        except OSError:
            return False

    def poll(self) -> list[MetricsEvent]:
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        if size < self._offset:
            self._offset, self._partial = 0, b""
            self.resets += 1
        if size == self._offset:
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            # Bounded per poll: a long finished run is read in slices, so the caller can show
            # progress and notice a cancel between slices instead of parsing 100 MB at once.
            data = fh.read(min(size - self._offset, self.max_read))
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        events: list[MetricsEvent] = []
        for raw in lines:
            if not raw.strip():
                continue
            try:
                obj = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.bad_lines += 1
                continue
            ev = event_from_json(obj) if isinstance(obj, dict) else None
            if ev is not None:
                events.append(ev)
        return events


# tqdm's "12/300 [00:05<01:40,  2.88it/s]" (or "s/it" when slow): progress, not a failure.
_TQDM = re.compile(r"(\d+)/(\d+) \[[^\]]*?(?:,\s*([\d.]+)(it/s|s/it))?\]")


@dataclass
class HfLogParser:
    """Turns HF Trainer log segments into events when no metrics.jsonl exists.

    Feed it every segment in order (lines split on newline AND carriage return, as the log
    follower delivers them): tqdm segments give the step and rate, ``{'loss': ...}`` dicts the
    values, the ``{'train_runtime': ...}`` dict the end.
    """

    step: int = field(default=0, init=False)
    max_steps: int | None = field(default=None, init=False)
    step_time_s: float | None = field(default=None, init=False)
    _logged: int = field(default=0, init=False, repr=False)

    def feed(self, segment: str) -> list[MetricsEvent]:
        out: list[MetricsEvent] = []
        if " [" not in segment and "{'" not in segment:
            return out  # neither a tqdm redraw nor a logged dict: the common case, kept cheap
        for m in _TQDM.finditer(segment):
            self.step, self.max_steps = int(m.group(1)), int(m.group(2))
            if m.group(3):
                rate = float(m.group(3))
                if rate > 0:
                    self.step_time_s = 1.0 / rate if m.group(4) == "it/s" else rate
        start = segment.find("{'")
        if start < 0:
            return out
        end = segment.rfind("}")
        if end <= start:
            return out
        try:
            d = ast.literal_eval(segment[start : end + 1])
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return out
        if not isinstance(d, dict):
            return out
        if "train_runtime" in d:
            out.append(
                RunEnd(
                    _num(d.get("train_runtime")),
                    True,
                    None,
                    _num(d.get("train_loss")),
                    _num(d.get("train_samples_per_second")),
                    _num(d.get("train_steps_per_second")),
                )
            )
        elif "loss" in d or "grad_norm" in d:
            self._logged += 1
            step = self.step if self.step else self._logged
            out.append(
                StepRecord(
                    step=step,
                    max_steps=self.max_steps,
                    epoch=_num(d.get("epoch")),
                    loss=_num(d.get("loss")),
                    learning_rate=_num(d.get("learning_rate")),
                    grad_norm=_num(d.get("grad_norm")),
                    step_time_s=self.step_time_s,
                )
            )
        return out

    def parse_file(self, path: Path) -> list[MetricsEvent]:
        text = path.read_text(encoding="utf-8", errors="replace")
        events: list[MetricsEvent] = []
        for seg in split_segments(text):
            events.extend(self.feed(seg))
        return events


def real_mfu(real_tokens_per_s: float | None, start: RunStart | None) -> float | None:
    """Real-token MFU from a rate and the start line (entries before mfu_nonpad existed)."""
    if not real_tokens_per_s or start is None or not start.peak_flops or not start.flops_6n:
        return None
    return real_tokens_per_s / (start.world_size or 1) * start.flops_6n / start.peak_flops


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
