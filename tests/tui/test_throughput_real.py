"""The throughput meter shows real-token MFU when the entry logged it (docs/monitor.md)."""

from __future__ import annotations

import re
from pathlib import Path

from backend.monitor import MetricsFollower, RunTracker
from widgets.throughput import render_summary

PERF = Path(__file__).resolve().parents[1] / "fixtures" / "perf"


def test_meter_shows_real_token_mfu_of_a_packed_h200_run() -> None:
    tracker = RunTracker(source="metrics")
    tracker.update(MetricsFollower(PERF / "7b-probe1-packed2048-metrics.jsonl").poll())
    shown = str(render_summary(tracker.summary(), "finished"))
    lines = shown.splitlines()
    # A finished run opens on its final summary; the rate headline follows it.
    assert lines[2] == "Final summary"
    headline = next(i for i, line in enumerate(lines) if re.match(r"real tok/s [\d,]+$", line))
    assert lines[headline + 1] == "real-token MFU 34.3%"
    assert "padded tok/s" in shown
