"""Quitting while a server the wizard started stays up says so, with how to stop it.

The quit dialog said "no run is going" (or did not ask at all) while the API server started by
the Monitor's Serve key kept running. It now lists each server this wizard started that is still
up (its URL and `trainwiz stop RUN`) and each run that keeps going; once the server is gone,
quitting asks nothing. The serve is a stand-in (tests/fake_serve.py): no model is loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backend.preset import load_preset
from backend.results import serve_run
from screens.dialogs import ConfirmDialog
from screens.monitor import MonitorScreen
from tests.fake_serve import FakeServe, fake_serve
from tests.run_records import make_ended_run
from tests.waiting import pilot_until
from tui.app import TrainwizApp


def _dialog_text(app: TrainwizApp) -> str:
    screen = app.screen
    if not isinstance(screen, ConfirmDialog):
        return f"<{type(screen).__name__}>"
    return " ".join(screen.body.plain.split())


async def test_quit_lists_the_server_the_wizard_started(monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path(os.environ["TRAINWIZ_HOME"])
    run_dir = make_ended_run(home, "finished", None, preset="tiny-cpu", log="done\n")
    started: list[FakeServe] = []

    def serve_in_background(run: Path, port: int = 8000) -> tuple[str, str]:
        started.append(fake_serve(run, port))
        return "information", f"serving {run.name} at {started[-1].base_url}"

    monkeypatch.setattr(serve_run, "serve_in_background", serve_in_background)
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="monitor",
                      attach_run=run_dir)  # fmt: skip
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.screen
            assert isinstance(screen, MonitorScreen)
            screen.action_serve()  # the Serve key's action (v)
            await pilot_until(pilot, lambda: started and run_dir in getattr(app, "served", []), timeout=30,
                              what="the serve to start and the wizard to know it",
                              seen=lambda: (started, app.served))  # fmt: skip
            await pilot.press("ctrl+q")
            await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmDialog), timeout=30,
                              what="the quit dialog", seen=lambda: _dialog_text(app))  # fmt: skip
            text = _dialog_text(app)
            assert started[0].base_url in text, text
            assert f"trainwiz stop {run_dir.name}" in text, text
            assert "no run is going" not in text, text
            await pilot.press("n")  # stay; the server goes away meanwhile
            await pilot_until(pilot, lambda: not isinstance(app.screen, ConfirmDialog),
                              timeout=30, what="the dialog to close")  # fmt: skip
            started[0].end()
            await pilot.press("ctrl+q")
            await pilot_until(pilot, lambda: not app.is_running, timeout=30,
                              what="quit without asking", seen=lambda: _dialog_text(app))  # fmt: skip
    finally:
        for served in started:
            served.end()
