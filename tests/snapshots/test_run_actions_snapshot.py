"""Snapshots: the Monitor of a failed run with a checkpoint (Resume offered), its Resume
confirmation, and the Chat view, at 120x40 and 80x24.

The run is the recorded real tiny run of tests/fixtures/resumeui (SIGKILLed after checkpoint-10).
The Chat view's worker is replaced by ``RecordedChat``, which answers with the reply the real
worker gave for that prompt: a snapshot fixes the layout, and the model's timing would make it
differ on every run. The real worker is what tests/tui/test_run_actions.py and the tmux e2e use.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual import work
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Input

from screens.chat import ChatScreen
from screens.dialogs import ConfirmDialog
from screens.monitor import MonitorScreen
from screens.run_actions import RunActions
from tests.tui.test_monitor import MonitorHarness, monitor_state, one_row_trace, replay_factory
from tests.waiting import pilot_until
from widgets.run_header import RunHeader

REC = Path(__file__).resolve().parents[1] / "fixtures" / "resumeui"
RUN_ID = "20261201-124616-tiny-resume"
PROMPT = "Hello there"
REPLY = "The capital of 100000000000000000000000000000000000000000000000000000000  1000  10"


ENDED_AT = 1796129235.8152156
# The confirmation prints the run's directory: a fixed one keeps the picture the same each time.
ROOT = Path(tempfile.gettempdir()) / "trainwiz-snapshot-resumeui"


@pytest.fixture(autouse=True)
def clean_root() -> Iterator[None]:
    """No frozen clock: a killed run has no end line, and the Monitor must stop its "ran" at the
    record's ended_at (it used to count to now, so these pictures changed every second)."""
    shutil.rmtree(ROOT, ignore_errors=True)
    yield
    shutil.rmtree(ROOT, ignore_errors=True)


def recorded_run(root: Path = ROOT) -> Path:
    """The recorded run as a run directory (status, launch.json, checkpoint-10 without weights)."""
    run = root / "runs" / RUN_ID
    ckpt = run / "output" / "checkpoint-10"
    ckpt.mkdir(parents=True)
    for name in ("train.log", "metrics.jsonl", "attempts.json"):
        shutil.copy(REC / name, run / name)
    for name in ("trainer_state.json", "trainwiz-complete.json", "config.json"):
        shutil.copy(REC / name, ckpt / name)
    preset = (REC / "preset.yaml").read_text().replace("@RUN", str(run))
    (run / "preset.yaml").write_text(preset)
    (run / "launch.json").write_text(
        json.dumps({"runner": "host", "train": {"display": "torchrun … train_entry.py …"}})
    )
    status = {
        "run_id": RUN_ID,
        "preset": "tiny-resume",
        "runner": "host",
        "state": "failed",
        "started_at": 1796129178.357969,
        "ended_at": ENDED_AT,
        "exit_code": 1,
        "message": "trainer pid 13968 killed by signal SIGKILL (exit code 1)",
        "cause": "signal",
    }
    (run / "status.json").write_text(json.dumps(status))
    return run


def monitor_app(tmp_path: Path) -> MonitorHarness:
    screen = MonitorScreen(
        recorded_run(),
        gpu_source=replay_factory(one_row_trace(tmp_path)),
        gpu_interval=0.05,
    )
    return MonitorHarness(screen)


def chart_drawn(chart: Any) -> bool:
    """The chart drew the metrics file's view (a run that is not finished redraws at most once
    a second, so a timer may still hold the last view back)."""
    view = chart.view
    return view is not None and view.summary.source == "metrics" and chart._pending is None


async def settled(pilot: Pilot, app: Any) -> None:  # type: ignore[type-arg]
    def landed() -> bool:
        screen = app.screen
        bars = screen.query(RunActions)
        meter = screen.query_one("ThroughputMeter")
        return bool(
            bars
            and bars.first().offers is not None
            and meter.summary is not None
            and meter.summary.step == 10
            and meter.state == "failed"
            and screen.query_one("LogPane").model.total > 40
            and chart_drawn(screen.query_one("LossChart"))
            # the metrics worker names the world size a poll after the state; at 80 columns
            # it wraps the header to a second line, which takes a row from the chart
            and screen.query_one(RunHeader).world_size == 1
            and screen.query_one("GpuPanel").snapshot is not None  # its rows are drawn
        )

    def seen() -> str:
        bars = app.screen.query(RunActions)
        offers = bars.first().offers if bars else None
        chart = chart_drawn(app.screen.query_one("LossChart"))
        headers = app.screen.query(RunHeader)
        world = headers.first().world_size if headers else None
        return (
            f"{monitor_state(app)}, offers {offers is not None}, chart drawn {chart}, "
            f"world size {world}"
        )

    await pilot_until(
        pilot,
        landed,
        what="the monitor to settle on the failed run (offers, step 10, log, chart, world size, GPUs)",
        timeout=30,
        seen=seen,
    )
    await pilot.pause()


def test_monitor_resume_offered_120x40(snap_compare: Any, tmp_path: Path) -> None:
    app = monitor_app(tmp_path)

    async def run_before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        await settled(pilot, app)

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_monitor_resume_offered_80x24(snap_compare: Any, tmp_path: Path) -> None:
    app = monitor_app(tmp_path)

    async def run_before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        await settled(pilot, app)

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


def test_monitor_resume_confirmation_80x24(snap_compare: Any, tmp_path: Path) -> None:
    app = monitor_app(tmp_path)

    async def run_before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        await settled(pilot, app)
        await pilot.press("r")
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, ConfirmDialog) and app.screen.is_mounted,
            what="the Resume confirmation",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


class RecordedChat(ChatScreen):
    """The Chat view with the real worker's recorded answer instead of a model process."""

    @work(thread=True, exclusive=True, exit_on_error=False, group="chat-session")
    def _session_worker(self) -> None:
        self.post_message(self.Ready("/home/user/.trainwiz/runs/…/output", "cpu", 3.2))
        while (prompt := self._prompts.get()) is not None:
            self.post_message(self.Reply(prompt, REPLY, 0.4))


class ChatHarness(App[None]):
    def __init__(self, run: Path) -> None:
        super().__init__()
        self._chat = RecordedChat(run)

    def on_mount(self) -> None:
        self.push_screen(self._chat)


def chat_snapshot(snap_compare: Any, tmp_path: Path, size: tuple[int, int]) -> bool:
    app = ChatHarness(recorded_run())

    async def run_before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        app._chat.query_one("#chat-input", Input).cursor_blink = False  # one frame, not two
        status = lambda: str(app._chat.query_one("#chat-status").render())  # noqa: E731
        await pilot_until(
            pilot, lambda: app._chat.ready, what="the chat to be ready", timeout=20, seen=status
        )
        await pilot.press(*PROMPT, "enter")
        await pilot_until(
            pilot, lambda: app._chat.replies, what="the recorded reply", timeout=20, seen=status
        )
        await pilot.pause()

    return bool(snap_compare(app, terminal_size=size, run_before=run_before))


def test_chat_view_120x40(snap_compare: Any, tmp_path: Path) -> None:
    assert chat_snapshot(snap_compare, tmp_path, (120, 40))


def test_chat_view_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert chat_snapshot(snap_compare, tmp_path, (80, 24))
