"""The Monitor's Serve key (v): dimmed while the run has no model to serve (the actions bar's
Chat reason says why), and on a finished run it starts `trainwiz serve --detach` and says the
URL; `trainwiz stop` then leaves no serve process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from backend.preset import load_preset
from backend.results.serve import serve_processes
from backend.results.serve_run import read_record
from screens.monitor import MonitorScreen
from tests.backend.test_results_add_up import make_run, trained_lora_run
from tui.app import TrainwizApp

ROOT = Path(__file__).resolve().parents[2]


def attached(run_dir: Path) -> TrainwizApp:
    return TrainwizApp(load_preset(run_dir / "preset.yaml"), str(run_dir / "preset.yaml"),
                       start_step="monitor", attach_run=run_dir)  # fmt: skip


async def wait_for(pilot, check, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        await pilot.pause(0.2)


async def test_serve_key_is_dimmed_without_a_model(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, "finished", checkpoint=None)
    app = attached(run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(1.0)
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        assert screen.check_action("serve", ()) is None  # shown, dimmed
        await pilot.press("v")
        await pilot.pause(0.5)
        assert read_record(run_dir) is None and serve_processes(run_dir) == []


async def test_serve_key_serves_a_finished_lora_run(tmp_path: Path, tiny_model: Path) -> None:
    run_dir = trained_lora_run(tmp_path, tiny_model)
    app = attached(run_dir)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.screen
            await wait_for(pilot, lambda: screen.check_action("serve", ()) is True, 30, "serve")
            await pilot.press("v")
            await wait_for(pilot, lambda: bool((read_record(run_dir) or {}).get("ready")), 240,
                           "the model to be served")  # fmt: skip
            await pilot.pause(0.5)
            record = read_record(run_dir) or {}
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
