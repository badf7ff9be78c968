"""The Monitor's Serve key (v): dimmed while the run has no model to serve (the actions bar's
Chat reason says why), and on a finished run it starts `trainwiz serve --detach` and says the
URL; `trainwiz stop` then leaves no serve process."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from backend.preset import load_preset
from backend.results.serve import serve_processes
from backend.results.serve_run import read_record
from screens.monitor import MonitorScreen
from screens.run_actions import RunActions
from tests.backend.test_results_add_up import make_run, trained_lora_run
from tests.waiting import pilot_until
from tui.app import TrainwizApp

ROOT = Path(__file__).resolve().parents[2]


def attached(run_dir: Path) -> TrainwizApp:
    return TrainwizApp(load_preset(run_dir / "preset.yaml"), str(run_dir / "preset.yaml"),
                       start_step="monitor", attach_run=run_dir)  # fmt: skip


def offers_of(app: TrainwizApp) -> Any:
    """The Monitor's run actions as checked (None until the check has answered)."""
    bars = app.screen.query(RunActions)
    return bars.first().offers if bars else None


def actions_note(app: TrainwizApp) -> str:
    """The actions bar's line (what Resume and Chat will do, or why not), or the screen shown."""
    bars = app.screen.query("#run-actions-note")
    return str(bars.first().render()) if bars else f"no actions bar on {type(app.screen).__name__}"


async def test_serve_key_is_dimmed_without_a_model(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "finished", checkpoint=None)
    app = attached(run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, MonitorScreen) and offers_of(app) is not None,
            what="the Monitor to check what the run offers",
            timeout=20,
            seen=lambda: actions_note(app),
        )
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        assert screen.check_action("serve", ()) is None  # shown, dimmed
        await pilot.press("v")
        await pilot.pause()  # the key was handled in press(): a serve would have started now
        assert not [w for w in app.workers if w.group == "monitor-serve"]
        assert read_record(run_dir) is None and serve_processes(run_dir) == []


@pytest.mark.slow
async def test_serve_key_serves_a_finished_lora_run(tmp_path: Path, tiny_model: Path) -> None:
    run_dir = trained_lora_run(tmp_path, tiny_model)
    app = attached(run_dir)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.screen
            await pilot_until(
                pilot,
                lambda: screen.check_action("serve", ()) is True,
                what="Serve to be offered",
                timeout=30,
                seen=lambda: actions_note(app),
            )
            await pilot.press("v")
            await pilot_until(
                pilot,
                lambda: bool((read_record(run_dir) or {}).get("ready")),
                what="the model to be served",
                timeout=240,  # a real model loads in a fresh server process
                seen=lambda: (read_record(run_dir), [n.message for n in app._notifications]),
            )
            record = read_record(run_dir) or {}
            await pilot_until(
                pilot,
                lambda: any(record["base_url"] in n.message for n in app._notifications),
                what="a notification with the server's URL",
                timeout=30,
                seen=lambda: [n.message for n in app._notifications],
            )
            shown = [n.message for n in app._notifications]
            assert any(record["base_url"] in m for m in shown), shown
        body = {"model": run_dir.name, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 4}  # fmt: skip
        request = urllib.request.Request(
            record["base_url"] + "/chat/completions", data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="POST",
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=120) as answer:
            assert json.loads(answer.read())["model"] == run_dir.name
    finally:
        subprocess.run([sys.executable, "-m", "tui.cli", "stop", str(run_dir)], cwd=ROOT,
                       capture_output=True, timeout=120)  # fmt: skip
    assert serve_processes(run_dir) == []
