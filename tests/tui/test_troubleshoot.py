"""Pilot tests: pick a run, read findings, review a fix's diff, apply (relaunch or save)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import OptionList, Static, TextArea

from backend.preset import Preset, load_preset
from backend.runs.diagnose_run import diagnosable_runs
from screens.fix_review import FixReviewDialog
from screens.troubleshoot import TroubleshootScreen
from tests.waiting import pilot_until
from tui.app import TrainwizApp

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[2]
RUN_ID = "20261130-040000-vicuna-7b-4xa100-40g"


def _make_run(log: str = "cuda_oom/fastchat-1781-vicuna7b-a100-40g.log") -> Path:
    run = Path(os.environ["TRAINWIZ_HOME"]) / "runs" / RUN_ID
    run.mkdir(parents=True)
    shutil.copy(FIXTURES / "logcorpus" / log, run / "train.log")
    shutil.copy(REPO / "presets" / "vicuna-7b-4xa100-40g.yaml", run / "preset.yaml")
    (run / "status.json").write_text(json.dumps({"run_id": RUN_ID, "state": "failed"}))
    return run


def _app() -> TrainwizApp:
    return TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu")


def _static_text(screen: TroubleshootScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def _screen_name(app: TrainwizApp) -> str:
    return type(app.screen).__name__


async def _shown(pilot: Pilot[Any], app: TrainwizApp, kind: type) -> None:
    """Wait until the screen on top is a ``kind``."""
    await pilot_until(
        pilot,
        lambda: isinstance(app.screen, kind),
        what=f"the {kind.__name__}",
        timeout=20,
        seen=lambda: _screen_name(app),
    )


async def _diagnosed(pilot: Pilot[Any], screen: TroubleshootScreen) -> None:
    """Wait for the diagnosis to land on the screen (with its findings listed)."""
    await pilot_until(
        pilot,
        lambda: screen.diagnosis is not None,
        what="the diagnosis",
        timeout=30,
        seen=lambda: _static_text(screen, "#ts-status"),
    )
    await pilot.pause()  # the first finding's highlight (a message) shows its fixes again


def test_list_runs_reads_state() -> None:
    _make_run()
    runs = diagnosable_runs()
    assert [(r.run_id, r.state, r.preset is not None) for r in runs] == [(RUN_ID, "failed", True)]


async def test_pick_run_review_fix_and_save_when_launch_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A host without a relaunch hook (the app has one): the fixed preset is saved and loaded.
    monkeypatch.setattr(TrainwizApp, "relaunch", None)
    _make_run()
    app = _app()
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+t")
        await _shown(pilot, app, TroubleshootScreen)
        screen = app.screen
        assert isinstance(screen, TroubleshootScreen)
        screen.query_one("#ts-runs", OptionList).focus()
        await pilot.press("enter")
        await _diagnosed(pilot, screen)
        assert screen.diagnosis is not None
        assert screen.diagnosis.findings[0].category == "cuda_oom"
        assert "vicuna-7b-4xa100-40g" in _static_text(screen, "#ts-status")
        assert "Tried to allocate" in _static_text(screen, "#ts-explain")
        fixes = screen.query_one("#ts-fixes", OptionList)
        labels = [str(fixes.get_option_at_index(i).prompt) for i in range(fixes.option_count)]
        batch_index = next(i for i, label in enumerate(labels) if "per-device batch" in label)
        fixes.focus()
        fixes.highlighted = batch_index
        await pilot.press("enter")
        await _shown(pilot, app, FixReviewDialog)
        dialog = app.screen
        assert isinstance(dialog, FixReviewDialog)
        assert any(line.startswith("+  per_device_train_batch_size: 1") for line in dialog.diff)
        assert app.preset.name == "tiny-cpu"  # nothing applied before confirmation
        saved = Path(os.environ["TRAINWIZ_HOME"]) / "presets" / "vicuna-7b-4xa100-40g.fixed.yaml"
        await pilot.press("y")
        await pilot_until(
            pilot,
            lambda: saved.is_file() and app.preset == load_preset(saved),
            what=f"the fixed preset saved to {saved} and loaded",
            timeout=20,
            seen=lambda: (
                f"screen {_screen_name(app)}, preset {app.preset.name!r}, saved {saved.is_file()}"
            ),
        )
    assert saved.is_file()
    fixed = load_preset(saved)
    assert fixed.training.per_device_train_batch_size == 1
    assert fixed.training.gradient_accumulation_steps == 32
    assert app.preset == fixed


async def test_cancel_changes_nothing_and_relaunch_callback_gets_fixed_preset() -> None:
    _make_run("port_in_use/dlrover-443-init-process-group-server-socket.log")
    launched: list[Preset] = []
    app = _app()
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        app.push_screen(TroubleshootScreen(run_id=RUN_ID, relaunch=launched.append))
        await _shown(pilot, app, TroubleshootScreen)
        screen = app.screen
        assert isinstance(screen, TroubleshootScreen)
        await _diagnosed(pilot, screen)
        assert (
            screen.diagnosis is not None and screen.diagnosis.findings[0].category == "port_in_use"
        )
        screen.query_one("#ts-fixes", OptionList).focus()
        await pilot.press("enter")
        await _shown(pilot, app, FixReviewDialog)
        assert isinstance(app.screen, FixReviewDialog)
        await pilot.press("escape")
        await _shown(pilot, app, TroubleshootScreen)
        assert launched == []
        await pilot.press("enter")
        await _shown(pilot, app, FixReviewDialog)
        await pilot.press("y")
        await pilot_until(
            pilot,
            lambda: launched,
            what="the relaunch callback to get the fixed preset",
            timeout=20,
            seen=lambda: _screen_name(app),
        )
    assert len(launched) == 1
    assert launched[0].launch.master_port != load_preset("vicuna-7b-4xa100-40g").launch.master_port


async def test_pasted_log_and_path_and_no_runs() -> None:
    app = _app()
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+t")
        await _shown(pilot, app, TroubleshootScreen)
        screen = app.screen
        assert isinstance(screen, TroubleshootScreen)
        runs = screen.query_one("#ts-runs", OptionList)
        assert "No runs with a train.log" in str(runs.get_option_at_index(0).prompt)
        screen.query_one("#ts-paste", TextArea).text = (
            "Collecting flash-attn\n  Getting requirements to build wheel\n"
            "  ModuleNotFoundError: No module named 'torch'\n"
        )
        await pilot.press("ctrl+r")
        await _diagnosed(pilot, screen)
        assert screen.diagnosis is not None
        assert screen.diagnosis.findings[0].category == "flash_attn_build"
        assert "tiny-cpu" in _static_text(screen, "#ts-status")  # fixes against the open preset
        screen.query_one("#ts-path").focus()
        await pilot.press(*"/nonexistent.log", "enter")
        await pilot_until(
            pilot,
            lambda: "no such file" in _static_text(screen, "#ts-status"),
            what="the status line to say the file is missing",
            timeout=20,
            seen=lambda: _static_text(screen, "#ts-status"),
        )
        assert "no such file" in _static_text(screen, "#ts-status")
        await pilot.press("escape")
        await pilot_until(
            pilot,
            lambda: not isinstance(app.screen, TroubleshootScreen),
            what="escape to close Troubleshoot",
            timeout=20,
            seen=lambda: _screen_name(app),
        )
        assert not isinstance(app.screen, TroubleshootScreen)
