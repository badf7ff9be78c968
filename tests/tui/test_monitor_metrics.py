"""The monitor on metrics.jsonl: token rates and MFU from the recorded H200 figures, 100k steps."""

from __future__ import annotations

import json
from pathlib import Path

from backend.monitor import HfLogParser, StepRecord
from screens.monitor import MonitorScreen
from tests.tui.test_monitor import (
    LOG_2G,
    MonitorHarness,
    expected_log_lines,
    make_run,
    monitor_state,
    one_row_trace,
    replay_factory,
    settle,
)
from tests.waiting import pilot_until
from widgets.loss_chart import LossChart
from widgets.throughput import ThroughputMeter

# The recorded 2-GPU run (fastchat-1b-throughput.jsonl, tag noofl_bs4_nogc_2g): batch 4 per GPU
# x 2 GPUs x 2048 tokens per step, median step 0.2546 s, MFU 0.2891.
TOKENS_PER_STEP = 4 * 2 * 2048
STEP_S = 0.2546
MFU = 0.2891


def write_metrics(run: Path, steps: list[dict], end: bool = True) -> None:  # type: ignore[type-arg]
    lines = [
        {
            "kind": "start",
            "world_size": 2,
            "n_params": 1_347_000_000,
            "flops_per_token": None,
            "peak_flops": 989e12,
            "gpu_name": "NVIDIA H200",
        }
    ]
    lines += steps
    if end:
        lines.append({"kind": "end", "train_runtime": 3.6169, "saved_to": None, "ok": True})
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def step_line(step: int, max_steps: int, loss: float, lr: float, gn: float) -> dict:  # type: ignore[type-arg]
    return {
        "kind": "step",
        "step": step,
        "max_steps": max_steps,
        "epoch": step / 50,
        "loss": loss,
        "learning_rate": lr,
        "grad_norm": gn,
        "step_time_s": STEP_S,
        "tokens": TOKENS_PER_STEP,
        "tokens_nonpad": TOKENS_PER_STEP // 2,
        "samples": 8,
        "tokens_per_s": TOKENS_PER_STEP / STEP_S,
        "tokens_nonpad_per_s": TOKENS_PER_STEP / 2 / STEP_S,
        "samples_per_s": 8 / STEP_S,
        "mfu": MFU,
        "peak_mem_gib": [28.71, 28.71],
        "time": 1796009600.0 + step * STEP_S,
    }


async def test_meter_shows_token_rates_and_mfu_from_metrics(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    recorded = [e for e in HfLogParser().parse_file(LOG_2G) if isinstance(e, StepRecord)]
    write_metrics(
        run,
        [
            step_line(r.step, 10, r.loss, r.learning_rate, r.grad_norm)  # type: ignore[arg-type]
            for r in recorded
        ],
    )
    app = MonitorHarness(MonitorScreen(run, gpu_source=replay_factory(one_row_trace(tmp_path))))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, len(expected_log_lines(LOG_2G)))
        meter = app.screen.query_one(ThroughputMeter)
        await pilot_until(
            pilot,
            lambda: meter.summary is not None and meter.summary.source == "metrics",
            what="the meter to take its figures from metrics.jsonl",
            timeout=30,
            seen=lambda: f"source {getattr(meter.summary, 'source', None)}; {monitor_state(app)}",
        )
        s = meter.summary
        assert s is not None and s.source == "metrics"
        shown = str(meter.render())
        assert "Throughput (metrics.jsonl) finished" in shown
        # the data's own tokens first (docs/monitor.md), the padded figures second
        assert shown.index("real tok/s 32,176") < shown.index("padded tok/s 64,352")
        assert "smp/s 31.42" in shown and "step 0.255s" in shown
        assert "padded MFU 28.9%" in shown and "ETA" not in shown  # over: a summary instead
        # over: the headline is the run's real tok/s, over its steps counted (figures.py)
        assert s.run_real_tokens_per_s == s.tokens_nonpad_per_s  # every step at the same pace
        # wall time: first step's start to last step's end (10 steps of 0.2546 s), not the
        # trainer's train_runtime (3.6169 s, its setup and final save included)
        assert s.wall_s is not None and abs(s.wall_s - 10 * STEP_S) < 1e-6
        assert "loss 10.8372 → 5.2617" in shown and "wall time 3s" in shown
        assert "GPU-hours" in shown  # 2 GPUs
        chart = app.screen.query_one(LossChart)
        assert chart.view is not None and chart.view.summary.source == "metrics"
        assert chart.view.loss[1][-1] == 5.2617 and chart.view.points == 10


async def test_chart_with_100k_steps_keeps_the_spike(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    n = 100_000
    steps = []
    for i in range(1, n + 1):  # only the fields a chart needs: the rest are optional
        loss = 80.0 if i == 61_234 else round(2.0 + 1.0 / i, 4)
        gn = 500.0 if i == 61_234 else 1.0 + (i % 7) * 0.01
        steps.append(
            {
                "kind": "step",
                "step": i,
                "max_steps": n,
                "loss": loss,
                "learning_rate": 2e-5,
                "grad_norm": gn,
            }
        )
    write_metrics(run, steps)
    app = MonitorHarness(MonitorScreen(run, gpu_source=replay_factory(one_row_trace(tmp_path))))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, len(expected_log_lines(LOG_2G)))
        chart = app.screen.query_one(LossChart)

        def chart_state() -> str:
            view = chart.view
            if view is None:
                return "no chart yet"
            summary = view.summary
            return f"{view.points} points from {summary.source}, finished {summary.finished}"

        await pilot_until(
            pilot,
            lambda: (
                chart.view is not None
                and chart.view.summary.source == "metrics"
                and chart.view.summary.finished
            ),
            what="the chart to take all 100k steps of metrics.jsonl",
            timeout=60,  # the metrics worker reads the 100k-line file in slices
            seen=chart_state,
        )
        view = chart.view
        assert view is not None and view.points == n
        xs, ys = view.loss
        assert len(xs) <= 2 * app.screen.chart_width  # type: ignore[attr-defined]
        assert 80.0 in ys and xs[ys.index(80.0)] == 61_234
        assert view.spike_total == 1 and view.spikes[0].step == 61_234
        caption = str(app.screen.query_one("#loss-caption").render())
        assert "100000 pts" in caption
        assert "1 grad-norm spike (step 61234: 500 vs median 1.03)" in caption
