"""Pilot tests: the monitor driven by the recorded H200 trace and the recorded H200 training log."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from textual.app import App
from textual.pilot import Pilot

from backend.monitor import (
    GpuSource,
    LogFollower,
    StaticOwner,
    TraceReplaySource,
    is_progress,
    split_segments,
)
from backend.monitor.owner import OwnerResolver
from screens.monitor import MonitorScreen
from tests.waiting import pilot_until
from widgets.gpu_panel import GpuPanel, render_snapshot
from widgets.log_pane import LogPane, OpenTroubleshoot
from widgets.loss_chart import LossChart
from widgets.throughput import ThroughputMeter

FIX = Path(__file__).resolve().parents[1] / "fixtures"
H200 = FIX / "h200"
LOG_2G = H200 / "train-log-noofl_bs4_nogc_2g.txt"
TRACE_2G = H200 / "nvml-trace-fastchat-1b-2gpu.jsonl"
PEAK_ROW = 361  # the 2-GPU run at full memory: 36.6 / 37.4 GiB, 569 W / 560 W
RUN_PIDS = frozenset({941, 942})  # torchrun 901's two ranks in that recording
_ = LogFollower


def make_run(root: Path, log: Path = LOG_2G, state: str = "finished") -> Path:
    run = root / "runs" / "20261130-033306-h200-2g"
    run.mkdir(parents=True)
    shutil.copy(log, run / "train.log")
    status = {
        "run_id": run.name,
        "preset": "h200-2g",
        "runner": "host",
        "state": state,
        "pid": None,
        "pgid": None,
        "container_id": None,
    }
    (run / "status.json").write_text(json.dumps(status))
    return run


def one_row_trace(tmp: Path, row: int = PEAK_ROW) -> Path:
    """The recorded trace's header plus one recorded sample: the panel then shows exactly it."""
    lines = TRACE_2G.read_text().splitlines()
    out = tmp / f"trace-row{row}.jsonl"
    out.write_text(lines[0] + "\n" + lines[row] + "\n")
    return out


def replay_factory(trace: Path):  # type: ignore[no-untyped-def]
    def factory(_owner: OwnerResolver) -> GpuSource:
        return TraceReplaySource(trace, owner=StaticOwner(RUN_PIDS, {941: "python", 942: "python"}))

    return factory


class MonitorHarness(App[None]):
    """Hosts the monitor screen alone and records the messages the real app would handle."""

    def __init__(self, screen: MonitorScreen) -> None:
        super().__init__()
        self._monitor = screen
        self.troubleshoot: list[OpenTroubleshoot] = []

    def on_mount(self) -> None:
        self.push_screen(self._monitor)

    def on_open_troubleshoot(self, message: OpenTroubleshoot) -> None:
        self.troubleshoot.append(message)


def expected_log_lines(log: Path) -> list[str]:
    return [s for s in split_segments(log.read_text(encoding="utf-8")) if not is_progress(s)]


def monitor_state(app: App) -> str:  # type: ignore[type-arg]
    """What the monitor shows: log lines, the meter's step and state, the GPU panel's state."""
    screen = app.screen
    pane = screen.query_one(LogPane)
    meter = screen.query_one(ThroughputMeter)
    gpus = screen.query_one(GpuPanel)
    summary = meter.summary
    step = None if summary is None else (summary.step, summary.max_steps, summary.finished)
    snap = gpus.snapshot
    return (
        f"{type(screen).__name__}: {pane.model.total} log lines, meter {step} {meter.state!r}, "
        f"gpus {None if snap is None else snap.state}"
    )


async def settle(pilot: Pilot, app: App, expect_lines: int) -> None:  # type: ignore[type-arg]
    """Waits (by pumping the event loop, not by timing) until every worker's data has landed."""

    def landed() -> bool:
        pane = app.screen.query_one(LogPane)
        meter = app.screen.query_one(ThroughputMeter)
        gpus = app.screen.query_one(GpuPanel)
        return bool(
            pane.model.total >= expect_lines
            and meter.summary is not None
            and meter.summary.finished
            and gpus.snapshot is not None
            and meter.state
        )

    await pilot_until(
        pilot,
        landed,
        what=f"the monitor to settle ({expect_lines} log lines, a finished run, a GPU sample)",
        timeout=30,
        seen=lambda: monitor_state(app),
    )
    await pilot.pause()


def build(tmp_path: Path, log: Path = LOG_2G) -> MonitorHarness:
    run = make_run(tmp_path, log)
    screen = MonitorScreen(
        run, gpu_source=replay_factory(one_row_trace(tmp_path)), gpu_interval=0.05
    )
    return MonitorHarness(screen)


async def test_monitor_shows_the_recorded_h200_run(tmp_path: Path) -> None:
    app = build(tmp_path)
    expected = expected_log_lines(LOG_2G)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, len(expected))
        screen = app.screen
        # GPU panel: the recorded peak sample, both ranks marked as this run.
        snap = screen.query_one(GpuPanel).snapshot
        assert snap is not None and [g.mem_used for g in snap.gpus] == [39256522752, 40141520896]
        text = render_snapshot(snap, 118).plain
        assert "GPU0 H200" in text and "GPU1 H200" in text
        assert "36.6/140G" in text and "37.4/140G" in text
        assert " 100%  51°C  569/700W" in text and "  52%  58°C  560/700W" in text
        assert "▶ 941 python 36.0G this run" in text and "▶ 942 python 36.8G this run" in text
        # Throughput meter: from the log (no metrics.jsonl): progress, end state, no token rate.
        meter = screen.query_one(ThroughputMeter)
        s = meter.summary
        assert s is not None and (s.step, s.max_steps, s.finished) == (10, 10, True)
        assert s.samples_per_s == 22.118 and s.elapsed_s == 3.6169
        assert meter.state == "finished"
        shown = str(meter.render())
        assert "step 10/10" in shown and "100%" in shown and "tok/s n/a (log only)" in shown
        assert "smp/s 22.12" in shown and "wall time 4s" in shown
        assert "ETA" not in shown  # a finished run has a final summary, no ETA
        assert "Final summary" in shown and "loss 10.8372 → 5.2617" in shown
        # Loss chart: ten recorded points, last loss and learning rate in the caption.
        chart = screen.query_one(LossChart)
        assert chart.view is not None and chart.view.points == 10
        assert chart.view.loss[1] == [
            10.8372,
            10.8403,
            9.2261,
            7.6375,
            6.949,
            5.9264,
            5.6062,
            5.4386,
            5.3178,
            5.2617,
        ]
        caption = str(screen.query_one("#loss-caption").render())
        assert "loss 5.2617" in caption and "lr 6.03e-07" in caption and "10 pts" in caption
        # Log pane: every non-progress line of the recorded log, in order, numbered.
        pane = screen.query_one(LogPane)
        assert [ln.text for ln in pane.model.lines] == expected
        assert pane.model.progress is not None and "10/10" in pane.model.progress
        header = str(screen.query_one("#log-header").render())
        assert f"following · {len(expected)} lines" in header


async def test_log_pane_keys_search_follow_and_troubleshoot(tmp_path: Path) -> None:
    app = build(tmp_path)
    expected = expected_log_lines(LOG_2G)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, len(expected))
        pane = app.screen.query_one(LogPane)
        await pilot.press("slash")
        await pilot.press(*"train_runtime")
        await pilot.press("enter")
        await pilot.pause()
        cur = pane.view.cursor
        assert cur is not None and "'train_runtime': 3.6169" in pane.model.lines[cur].text
        assert not pane.follow
        assert "paused" in str(app.screen.query_one("#log-header").render())
        await pilot.press("t")
        await pilot_until(
            pilot,
            lambda: app.troubleshoot,
            what="t to ask the app for Troubleshoot",
            timeout=20,
            seen=lambda: app.troubleshoot,
        )
        assert len(app.troubleshoot) == 1
        msg = app.troubleshoot[0]
        assert msg.run_id == "20261130-033306-h200-2g"
        assert msg.log_path is not None and msg.log_path.name == "train.log"
        assert msg.line_no == pane.model.lines[cur].no == 29  # the file's line, as an editor counts
        await pilot.press("f")
        await pilot.pause()
        assert pane.follow and pane.view.cursor is None
        await pilot.press("z")
        await pilot.pause()
        assert app.screen.maximized is pane
        await pilot.press("z")
        await pilot.pause()
        assert app.screen.maximized is None


async def test_flagged_lines_are_counted_coloured_and_jumped_to(tmp_path: Path) -> None:
    log = tmp_path / "oom.log"
    oom = FIX / "logcorpus" / "cuda_oom" / "fastchat-1781-vicuna7b-a100-40g.log"
    log.write_text(LOG_2G.read_text() + oom.read_text())
    app = build(tmp_path, log)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, len(expected_log_lines(log)))
        pane = app.screen.query_one(LogPane)
        assert not pane.classifier_missing
        assert pane.model.counts["cuda_oom"] >= 1
        header = str(app.screen.query_one("#log-header").render())
        assert f"cuda_oom {pane.model.counts['cuda_oom']}" in header
        await pilot.press("right_square_bracket")
        await pilot.pause()
        cur = pane.view.cursor
        assert cur is not None and pane.model.lines[cur].flag is not None


async def test_no_run_and_no_driver_are_said_plainly(tmp_path: Path) -> None:
    app = MonitorHarness(MonitorScreen(None))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot_until(
            pilot,
            lambda: app.screen.query_one(GpuPanel).snapshot is not None,
            what="the GPU panel's first sample",
            timeout=20,
            seen=lambda: str(app.screen.query_one(GpuPanel).render()),
        )
        panel = app.screen.query_one(GpuPanel)
        assert panel.snapshot is not None and panel.snapshot.state == "no_driver"
        assert "no NVIDIA driver" in str(panel.render())
        assert "No run to monitor" in str(app.screen.query_one("#monitor-none").render())


def test_other_users_processes_are_marked_other() -> None:
    src = TraceReplaySource(TRACE_2G, owner=StaticOwner(RUN_PIDS))
    lines = TRACE_2G.read_text().splitlines()
    row = next(i for i, ln in enumerate(lines[1:], 1) if '"pid": 743' in ln)
    text = render_snapshot(src.snapshot(json.loads(lines[row])), 118).plain
    assert "743" in text and "other" in text and "this run" not in text


async def test_a_run_launched_later_is_picked_up_on_return(tmp_path: Path) -> None:
    from textual.screen import Screen

    run = make_run(tmp_path)
    screen = MonitorScreen(None, gpu_source=replay_factory(one_row_trace(tmp_path)))
    app = MonitorHarness(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert screen.run is None and not screen.query(LogPane)
        app.current_run = run  # type: ignore[attr-defined]  # what the Launch step sets
        await app.push_screen(Screen())
        await pilot.pause()
        app.pop_screen()
        await settle(pilot, app, len(expected_log_lines(LOG_2G)))
        assert screen.run is not None and screen.run.run_dir == run
        assert screen.query_one(ThroughputMeter).summary.step == 10  # type: ignore[union-attr]


async def test_attach_opens_the_monitor_in_the_real_app(tmp_path: Path) -> None:
    from backend.preset import load_preset
    from tui.app import TrainwizApp

    run = make_run(tmp_path)
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="monitor", attach_run=run)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app, len(expected_log_lines(LOG_2G)))
        screen = app.screen
        assert isinstance(screen, MonitorScreen) and screen.run is not None
        assert screen.run.run_dir == run
        meter = screen.query_one(ThroughputMeter)
        assert meter.summary is not None and meter.summary.step == 10
        assert meter.state == "finished"
        # This machine has no NVIDIA driver: the real sampler says so in the panel.
        snap = screen.query_one(GpuPanel).snapshot
        assert snap is not None and snap.state == "no_driver"


def test_eight_gpus_fit_one_line_each_in_compact_mode() -> None:
    from dataclasses import replace

    src = TraceReplaySource(TRACE_2G, owner=StaticOwner(RUN_PIDS))
    lines = TRACE_2G.read_text().splitlines()
    snap = src.snapshot(json.loads(lines[PEAK_ROW]))
    eight = replace(snap, gpus=tuple(replace(snap.gpus[i % 2], index=i) for i in range(8)))
    text = render_snapshot(eight, 78, compact=True).plain.split("\n")
    assert len(text) == 8 and all(len(line) <= 78 for line in text)
    assert text[7].startswith("GPU7 H200") and text[7].endswith("▶1 run")
    assert "37.4/140G  52%  58°C  560/700W" in text[7]


async def test_live_run_updates_as_the_log_grows(tmp_path: Path) -> None:
    raw = LOG_2G.read_bytes()
    cut = raw.index(b"{'loss': 7.6375")  # mid-training: three steps logged so far
    partial = tmp_path / "partial.log"
    partial.write_bytes(raw[:cut])
    run = make_run(tmp_path, partial, state="running")
    app = MonitorHarness(
        MonitorScreen(run, gpu_source=replay_factory(one_row_trace(tmp_path)), gpu_interval=0.05)
    )
    async with app.run_test(size=(120, 40)) as pilot:
        meter = app.screen.query_one(ThroughputMeter)
        await pilot_until(
            pilot,
            lambda: meter.summary is not None and meter.summary.step == 3 and meter.state,
            what="the meter at step 3 of the running run",
            timeout=30,
            seen=lambda: monitor_state(app),
        )
        s = meter.summary
        assert s is not None and (s.step, s.max_steps, s.finished) == (3, 10, False)
        assert meter.state == "running" and s.eta_s is not None and s.eta_s > 0
        assert app.screen.query_one(LossChart).view.points == 3  # type: ignore[union-attr]
        with open(run / "train.log", "ab") as fh:
            fh.write(raw[cut:])
        status = json.loads((run / "status.json").read_text())
        (run / "status.json").write_text(json.dumps({**status, "state": "finished"}))
        await settle(pilot, app, len(expected_log_lines(LOG_2G)))
        await pilot_until(  # the status poll is its own worker: wait for it, not a timer
            pilot,
            lambda: meter.state == "finished",
            what="the status poll to see the run finished",
            timeout=30,
            seen=lambda: monitor_state(app),
        )
        assert meter.summary is not None and meter.summary.step == 10
        assert meter.state == "finished"
        assert app.screen.query_one(LossChart).view.points == 10  # type: ignore[union-attr]
        pane = app.screen.query_one(LogPane)
        assert [ln.text for ln in pane.model.lines] == expected_log_lines(LOG_2G)
