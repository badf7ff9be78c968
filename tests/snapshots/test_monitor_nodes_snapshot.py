"""Snapshots of a two-node run's monitor (2 H200 GPUs per node, replayed from the recorded
NVML trace by two real sampler processes) at 120x40 (two lines per GPU) and 80x24 (compact)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from backend.monitor.owner import OwnerResolver
from screens.monitor import MonitorScreen
from tests.tui.test_monitor import MonitorHarness
from tests.tui.test_monitor_nodes import LOG_LINES, pinned, replayed_nodes
from tests.waiting import pilot_until
from widgets.gpu_panel import GpuPanel
from widgets.log_pane import LogPane
from widgets.throughput import ThroughputMeter


def _app(run: Path) -> MonitorHarness:
    source = pinned(run)  # the clock pinned just after the last sample: a stable picture

    def factory(_owner: OwnerResolver) -> Any:
        return source

    return MonitorHarness(MonitorScreen(run, gpu_source=factory, gpu_interval=0.05))


async def _settle(pilot: Pilot) -> None:  # type: ignore[type-arg]
    app = pilot.app

    def landed() -> bool:
        panel = app.screen.query_one(GpuPanel)
        pane = app.screen.query_one(LogPane)
        meter = app.screen.query_one(ThroughputMeter)
        return bool(
            panel.snapshot
            and len(panel.snapshot.gpus) == 4
            and pane.model.total >= len(LOG_LINES)
            and meter.state
        )

    def seen() -> str:
        snap = app.screen.query_one(GpuPanel).snapshot
        gpus = None if snap is None else len(snap.gpus)
        pane = app.screen.query_one(LogPane)
        meter = app.screen.query_one(ThroughputMeter)
        return f"{gpus} GPUs, {pane.model.total} log lines, meter state {meter.state!r}"

    await pilot_until(
        pilot,
        landed,
        what="both nodes' 4 GPUs, every log line and the run's state",
        timeout=30,
        seen=seen,
    )
    await pilot.pause()


def test_monitor_two_nodes_120x40(snap_compare: Any, tmp_path: Path) -> None:
    with replayed_nodes(tmp_path) as (run, _procs):
        assert snap_compare(_app(run), terminal_size=(120, 40), run_before=_settle)


def test_monitor_two_nodes_80x24(snap_compare: Any, tmp_path: Path) -> None:
    with replayed_nodes(tmp_path) as (run, _procs):
        assert snap_compare(_app(run), terminal_size=(80, 24), run_before=_settle)
