"""Pilot tests: Resume and Chat on the Monitor, with real tiny CPU runs (docs/wizard.md).

Each run is a real ``tiny-cpu`` training through the CLI (fixtures and crash helpers of
tests/integration/test_resume_host.py); the wizard is the real TrainwizApp attached to it, as
``trainwiz attach RUN`` opens it. Nothing is faked but the one sharded checkpoint below, whose
layout (FSDP's ``pytorch_model_fsdp_0/`` and the marker, no full weights) is written by the test
because FSDP cannot run on this CPU-only machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from textual.pilot import Pilot
from textual.widgets import Button, Static

from backend.entry.checkpoints import MARKER
from backend.preset import load_preset
from backend.results.weights import WORKER
from screens.chat import ChatScreen
from screens.dialogs import ConfirmDialog
from screens.monitor import MonitorScreen
from screens.run_actions import RunActions
from tests.faults.conftest import home  # noqa: F401 (fixture: runs end after)
from tests.integration.test_launch_host import wait_state, wait_steps
from tests.integration.test_resume_host import (
    FINAL,
    kill_after_checkpoint,
    launch,
    preset_file,
    worker_pids,
)
from tests.waiting import pilot_until, wait_until
from tui.app import TrainwizApp

pytestmark = [pytest.mark.training, pytest.mark.slow, pytest.mark.usefixtures("home")]

LOAD_S = 240  # the model load and a reply on two shared cores (4 s when the machine is idle)


def short(preset: Path, **training: object) -> Path:
    """Fewer steps than the shipped preset: the machine running these is shared and slow."""
    data = yaml.safe_load(preset.read_text())
    data["training"].update(training)
    preset.write_text(yaml.safe_dump(data))
    return preset


def attached(run_dir: Path) -> TrainwizApp:
    return TrainwizApp(
        load_preset(run_dir / "preset.yaml"),
        str(run_dir / "preset.yaml"),
        start_step="monitor",
        attach_run=run_dir,
    )


async def until(
    pilot: Pilot,  # type: ignore[type-arg]
    check: Callable[[], object],
    what: str,
    timeout: float = 30,
) -> None:
    """``pilot_until`` with what the wizard shows on a time-out: the screen, the actions bar's
    line and the last notifications."""
    await pilot_until(pilot, check, what=what, timeout=timeout, seen=lambda: shown(pilot.app))


def shown(app: Any) -> str:
    """The screen shown, the actions bar's line and the last notifications."""
    notes = [str(n.message) for n in app._notifications][-3:]
    bars = app.screen.query("#run-actions-note")
    line = str(bars.first().render()) if bars else "-"
    return f"screen {type(app.screen).__name__}, actions {line!r}, notifications {notes}"


def note(app: TrainwizApp) -> str:
    return str(app.screen.query_one("#run-actions-note", Static).render())


def bar(app: TrainwizApp) -> RunActions:
    return app.screen.query_one(RunActions)


def chat_workers(run_dir: Path) -> list[int]:
    """Live chat worker processes of this run, found in /proc as an operator would."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if (
            state != "Z"
            and str(WORKER).encode() in argv
            and str(run_dir).encode() in b" ".join(argv)
        ):
            found.append(int(proc.name))
    return found


def no_chat_worker_within(run_dir: Path, timeout: float = 10) -> None:
    wait_until(
        lambda: not chat_workers(run_dir),
        what="the chat worker to end",
        timeout=timeout,
        seen=lambda: f"chat worker left running: {chat_workers(run_dir)}",
    )


async def test_resume_from_the_monitor_then_chat_with_the_result(tmp_path: Path) -> None:
    run_dir = launch(short(preset_file(tmp_path, "ui-resume"), max_steps=30, eval_steps=10))
    killed_at = kill_after_checkpoint(run_dir)
    assert wait_state(run_dir.name, FINAL)["state"] == "failed"

    app = attached(run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: bar(app).offers is not None, what="the run's offers")
        offers = bar(app).offers
        assert offers is not None and offers.resume.available and offers.chat.available
        step = offers.resume.checkpoint
        assert step is not None and step <= killed_at and step % 10 == 0
        assert not app.screen.query_one("#run-resume", Button).disabled
        assert f"✓ Resume: from checkpoint-{step}" in note(app)
        assert app.screen.check_action("resume", ()) is True  # footer: r Resume, enabled

        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), what="the confirmation")
        body = app.screen.query_one("#confirm-summary", Static).render()
        assert f"checkpoint-{step}" in str(body) and str(run_dir) in str(body)
        assert "attempt 2" in str(body)
        await pilot.press("y")
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")

        def finished() -> bool:
            offers = bar(app).offers
            return offers is not None and offers.state == "finished" and offers.attempt == 2

        await until(pilot, finished, timeout=300, what="attempt 2 to finish")
        await until(pilot, lambda: app.screen.query_one("ThroughputMeter").summary.step == 30,  # type: ignore[attr-defined]
                    timeout=30, what="the monitor at step 30")  # fmt: skip
        assert f"attempt 2 (from checkpoint-{step})" in note(app)
        assert "✗ Resume: the run finished" in note(app)
        assert app.screen.check_action("resume", ()) is None  # footer: dimmed
        attempts = json.loads((run_dir / "attempts.json").read_text())
        assert [(a["attempt"], a["how"]) for a in attempts] == [(1, "launch"), (2, "resume")]

        await pilot.press("a")  # Chat with the resumed run's final model
        await until(pilot, lambda: isinstance(app.screen, ChatScreen), what="the chat view")
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        assert "loading model" in str(chat.query_one("#chat-status", Static).render())
        await pilot.press(*"What is 2+2?", "enter")
        await until(pilot, lambda: bool(chat.replies), timeout=LOAD_S, what="a reply")
        assert chat.replies[0].strip()
        transcript = " ".join(str(s.render()) for s in chat.query(".chat-turn").results(Static))
        assert "you> What is 2+2?" in transcript and chat.replies[0].strip()[:20] in transcript
        assert chat_workers(run_dir)  # the model stays loaded between turns
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
    no_chat_worker_within(run_dir)


async def test_closing_the_chat_while_it_loads_stops_the_worker(tmp_path: Path) -> None:
    run_dir = launch(short(preset_file(tmp_path, "ui-chat", plain=True), max_steps=8))
    assert wait_state(run_dir.name, FINAL)["state"] == "finished"
    app = attached(run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: bar(app).available("chat"), what="chat to be offered")
        assert "✗ Resume: the run finished" in note(app)
        app.action_chat()  # the palette's "Chat with the run's model"
        await until(pilot, lambda: bool(chat_workers(run_dir)), timeout=30, what="the worker")
        assert isinstance(app.screen, ChatScreen) and not app.screen.ready
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, MonitorScreen), what="the monitor")
        no_chat_worker_within(run_dir)


async def test_live_then_crashed_run_without_checkpoint_says_why_not(tmp_path: Path) -> None:
    run_dir = launch(preset_file(tmp_path, "ui-nock", plain=True))  # save_strategy "no"
    wait_steps(run_dir, 2)
    app = attached(run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: bar(app).offers is not None, what="the run's offers")
        assert bar(app).offers.state == "running"  # type: ignore[union-attr]
        assert app.screen.query_one("#run-resume", Button).disabled
        assert app.screen.query_one("#run-chat", Button).disabled
        assert "✗ Resume: the run is running" in note(app) and "✗ Chat: the run is running" in note(
            app
        )
        assert app.screen.check_action("resume", ()) is None
        assert app.screen.check_action("chat", ()) is None

        for pid in worker_pids(run_dir):  # the crash: as the OOM killer would
            os.kill(pid, signal.SIGKILL)
        await until(pilot, lambda: bar(app).offers.state == "failed", timeout=120,  # type: ignore[union-attr]
                    what="the monitor to see the failure")  # fmt: skip
        assert "no complete checkpoint" in note(app) and "no saved model" in note(app)
        await pilot.press("r")  # disabled: nothing starts
        await pilot.pause()  # the key was handled in press(): a confirmation would be up now
        assert isinstance(app.screen, MonitorScreen)

        # the palette's Chat refuses as the dimmed `a` does, with the same reason
        assert "not available" in app.chat_help() and "no saved model" in app.chat_help()
        app.action_chat()
        await until(
            pilot,
            lambda: any(n.title == "Chat not available" for n in app._notifications),
            what="the palette's Chat to be refused with a notification",
        )
        assert isinstance(app.screen, MonitorScreen)  # no chat view opened to fail later
        said = [n.message for n in app._notifications if n.title == "Chat not available"]
        assert said and "no saved model" in said[-1]

        # An FSDP-sharded checkpoint whose shards never got their DCP .metadata (a save cut
        # off): nothing to consolidate, so Chat says there is no complete model. (Complete
        # sharded checkpoints are consolidated: tests/integration/test_results_sharded.py.)
        sharded = run_dir / "output" / "checkpoint-2"
        (sharded / "pytorch_model_fsdp_0").mkdir(parents=True)
        (sharded / "trainer_state.json").write_text("{}")
        (sharded / MARKER).write_text("{}")
        bar(app).refresh_offers()
        await until(pilot, lambda: "no complete checkpoint" in note(app), what="the refusal")

        # A model that cannot load: the worker crashes, the view names its log
        shutil.rmtree(sharded)
        out = run_dir / "output"
        shutil.copy(Path(os.environ["TRAINWIZ_HOME"]) / "models/tiny-llama/config.json", out)
        (out / "model.safetensors").write_bytes(b"not a safetensors file")
        app.action_chat()
        await until(pilot, lambda: isinstance(app.screen, ChatScreen), what="the chat view")
        chat = app.screen
        assert isinstance(chat, ChatScreen)
        await until(pilot, lambda: chat.failed is not None, timeout=LOAD_S, what="the crash")
        assert "the chat worker exited" in str(chat.failed) and "chat.log" in str(chat.failed)
        await pilot.press("escape")
    no_chat_worker_within(run_dir)
