"""Metrics from metrics.jsonl and from the recorded H200 HF Trainer logs; series and spikes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from backend.monitor import HfLogParser, MetricsFollower, MinMaxSeries, RunTracker, SpikeDetector
from backend.monitor.metrics import RunEnd, RunStart, StepRecord

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
LOG_2G = H200 / "train-log-noofl_bs4_nogc_2g.txt"
LOSSES_2G = [10.8372, 10.8403, 9.2261, 7.6375, 6.949, 5.9264, 5.6062, 5.4386, 5.3178, 5.2617]


def test_hf_log_parser_reads_the_recorded_h200_log() -> None:
    events = HfLogParser().parse_file(LOG_2G)
    steps = [e for e in events if isinstance(e, StepRecord)]
    assert [s.step for s in steps] == list(range(1, 11))
    assert [s.loss for s in steps] == LOSSES_2G
    assert all(s.max_steps == 10 for s in steps)
    assert steps[0].grad_norm == pytest.approx(25.972576141357422)
    assert steps[1].learning_rate == pytest.approx(2e-05)
    assert steps[-1].epoch == pytest.approx(0.2)
    # tqdm showed 3.14it/s when step 10 was logged.
    assert steps[-1].step_time_s == pytest.approx(1 / 3.14)
    ends = [e for e in events if isinstance(e, RunEnd)]
    assert len(ends) == 1
    assert ends[0].train_runtime == pytest.approx(3.6169)
    assert ends[0].samples_per_s == pytest.approx(22.118)
    assert ends[0].train_loss == pytest.approx(7.304079532623291)


def _log_misses(log: Path) -> list[str]:
    """How one recorded log falls short of a whole run: steps up to max_steps, one end, and a
    finished summary whose last loss is the last step's."""
    events = HfLogParser().parse_file(log)
    steps = [e for e in events if isinstance(e, StepRecord)]
    if not steps:
        return ["no steps parsed"]
    misses: list[str] = []
    if steps[-1].step != steps[-1].max_steps:
        misses.append(f"last step {steps[-1].step} of max_steps {steps[-1].max_steps}")
    ends = sum(isinstance(e, RunEnd) for e in events)
    if ends != 1:
        misses.append(f"{ends} run ends, want 1")
    tracker = RunTracker(source="log")
    tracker.update(events)
    s = tracker.summary()
    if not (s.finished and s.eta_s == 0 and s.progress == 1.0):
        misses.append(f"summary finished={s.finished} eta_s={s.eta_s} progress={s.progress}")
    if s.last_loss != steps[-1].loss:
        misses.append(f"summary last_loss {s.last_loss}, last step's loss {steps[-1].loss}")
    return misses


def test_every_recorded_log_parses_to_steps_and_an_end() -> None:
    """One test over all the recorded logs: the message names each log and what it lacked."""
    logs = sorted(H200.glob("train-log-*.txt"))
    assert len(logs) >= 6, logs
    misses = [f"{log.name}: {miss}" for log in logs for miss in _log_misses(log)]
    assert not misses, "\n".join(misses)


def test_tracker_from_log_only_has_no_token_rate() -> None:
    tracker = RunTracker(source="log")
    tracker.update(HfLogParser().parse_file(LOG_2G))
    s = tracker.summary()
    assert (s.step, s.max_steps) == (10, 10)
    assert s.tokens_per_s is None and s.mfu is None
    assert s.samples_per_s == pytest.approx(22.118)
    assert s.elapsed_s == pytest.approx(3.6169)


def _metrics_lines(n: int, max_steps: int) -> list[str]:
    start = {
        "kind": "start",
        "world_size": 2,
        "n_params": 1_347_000_000,
        "flops_per_token": 8.69e9,
        "peak_flops": 989e12,
        "gpu_name": "NVIDIA H200",
    }
    lines = [json.dumps(start)]
    for i in range(1, n + 1):
        st = 0.2546 if i > 1 else 1.5
        lines.append(
            json.dumps(
                {
                    "kind": "step",
                    "step": i,
                    "max_steps": max_steps,
                    "epoch": i / 50,
                    "loss": 10.0 - i * 0.1,
                    "learning_rate": 2e-5,
                    "grad_norm": 5.0,
                    "step_time_s": st,
                    "tokens": 16384,
                    "tokens_nonpad": 8192,
                    "samples": 8,
                    "tokens_per_s": 16384 / st,
                    "tokens_nonpad_per_s": 8192 / st,
                    "samples_per_s": 8 / st,
                    "mfu": None,
                    "peak_mem_gib": [28.7, 28.7],
                    "time": 1000.0 + i,
                }
            )
        )
    return lines


def test_metrics_follower_waits_for_partial_line_and_survives_truncation(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    f = MetricsFollower(path)
    assert f.poll() == []  # not there yet
    lines = _metrics_lines(3, 10)
    path.write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][:20])
    ev = f.poll()
    assert isinstance(ev[0], RunStart) and ev[0].world_size == 2
    assert [e.step for e in ev[1:] if isinstance(e, StepRecord)] == [1]
    with open(path, "a") as fh:
        fh.write(lines[2][20:] + "\nnot json\n" + lines[3] + "\n")
    ev = f.poll()
    assert [e.step for e in ev if isinstance(e, StepRecord)] == [2, 3]
    assert f.bad_lines == 1
    path.write_text(lines[0] + "\n")  # a new run reused the file
    ev = f.poll()
    assert f.resets == 1 and isinstance(ev[0], RunStart)


def test_tracker_throughput_mfu_and_eta_from_metrics(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(_metrics_lines(30, 100)) + "\n")
    tracker = RunTracker(source="metrics")
    tracker.update(MetricsFollower(path).poll())
    s = tracker.summary()
    assert s.step == 30 and s.progress == pytest.approx(0.3)
    assert s.step_time_s == pytest.approx(0.2546)  # warm-up step 1 left out of the window
    assert s.tokens_per_s == pytest.approx(16384 / 0.2546)
    assert s.tokens_nonpad_per_s == pytest.approx(8192 / 0.2546)
    assert s.samples_per_s == pytest.approx(8 / 0.2546)
    # MFU from the start line: tokens/s per GPU × flops/token / peak.
    assert s.mfu == pytest.approx(16384 / 0.2546 / 2 * 8.69e9 / 989e12)
    assert s.eta_s == pytest.approx(70 * 0.2546)
    assert s.peak_mem_gib == (28.7, 28.7) and s.world_size == 2
    assert not s.finished


def test_min_max_series_keeps_spikes_at_100k_points() -> None:
    series = MinMaxSeries(cap=512)
    for i in range(1, 100_001):
        y = 50.0 if i == 54_321 else (0.5 if i == 77_777 else 2.0 + math.sin(i / 500))
        series.append(i, y)
    series.append(100_001, math.nan)  # ignored
    assert series.count == 100_000
    xs, ys = series.points()
    assert len(xs) <= 2 * 512
    assert 50.0 in ys and xs[ys.index(50.0)] == 54_321
    xs80, ys80 = series.points(width=80)
    assert len(xs80) <= 160 and max(ys80) == 50.0 and min(ys80) == 0.5
    assert xs80 == sorted(xs80)
    assert series.ymax == 50.0 and series.ymin == 0.5


def test_spike_detector_flags_outliers_and_nonfinite() -> None:
    det = SpikeDetector()
    for step in range(1, 40):
        assert det.add(step, 1.0 + (step % 3) * 0.1) is None
    spike = det.add(40, 30.0)
    assert spike is not None and spike.step == 40 and spike.median == pytest.approx(1.1)
    assert det.add(41, math.inf) is not None
    assert det.total == 2 and [s.step for s in det.spikes] == [40, 41]


def test_tracker_view_carries_series_and_nonfinite_loss() -> None:
    tracker = RunTracker(source="metrics")
    tracker.update([StepRecord(step=i, loss=float(i), grad_norm=1.0) for i in range(1, 20)])
    tracker.update([StepRecord(step=20, loss=math.nan, grad_norm=100.0)])
    view = tracker.view(width=40)
    assert view.points == 19 and view.loss[1][-1] == 19.0
    assert view.nonfinite_loss_steps == (20,)
    assert view.spike_total == 1 and view.spikes[0].step == 20


def test_spike_detector_window_median_matches_statistics() -> None:
    import random
    import statistics

    det = SpikeDetector(window=50)
    rng = random.Random(1)
    seen: list[float] = []
    for i in range(400):
        v = rng.random() * 3 + 0.1
        det.add(i, v)
        seen.append(v)
        assert det._median() == pytest.approx(statistics.median(seen[-50:]))
