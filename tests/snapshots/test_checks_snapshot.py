"""Snapshots of the Checks step replaying a real `trainwiz check --json` recorded on the 2-core
CPU box against the vicuna-7b-4xa100-40g preset (no driver, no NVIDIA runtime, small disk)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

import screens.checks
from backend.checks import CheckResult
from backend.i18n import _
from backend.preset import load_preset
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from widgets.check_list import CheckList

RECORDED = Path(__file__).resolve().parents[1] / "fixtures/checks/cpu-box-vicuna-7b-4xa100-40g.json"


def _replay(
    preset: Any,
    on_result: Callable[[CheckResult], object] | None = None,
    cancel: threading.Event | None = None,
    **_: Any,
) -> list[CheckResult]:
    results = [CheckResult.model_validate(c) for c in json.loads(RECORDED.read_text())["checks"]]
    for result in results:
        if on_result is not None:
            on_result(result)
    return results


@pytest.fixture(autouse=True)
def _recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(screens.checks, "run_checks", _replay)


def _app() -> TrainwizApp:
    return TrainwizApp(load_preset("vicuna-7b-4xa100-40g"), "vicuna-7b-4xa100-40g")


def _settled(app: TrainwizApp, highlight: str | None = None) -> Callable[[Pilot[Any]], Any]:
    async def run_before(pilot: Pilot[Any]) -> None:
        screen = app.screen
        assert isinstance(screen, screens.checks.ChecksScreen)
        await pilot_until(
            pilot,
            lambda: not screen.running and screen.results,
            what="the recorded checks to land",
            timeout=20,
            seen=lambda: str(screen.query_one("#checks-status").render()),
        )
        if highlight:
            check_list = screen.query_one(CheckList)
            check_list.highlighted = check_list.get_option_index(highlight)
            title = _(check_list.titles.get(highlight, highlight))  # as the pane shows it
            await pilot_until(
                pilot,
                lambda: title in str(screen.query_one("#checks-detail-text").render()),
                what=f"the detail pane to show the {highlight} check",
                timeout=20,
                seen=lambda: str(screen.query_one("#checks-detail-text").render()),
            )
        await pilot.pause()

    return run_before


def test_checks_120x40(snap_compare: Any) -> None:
    app = _app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=_settled(app))


def test_checks_disk_detail_80x24(snap_compare: Any) -> None:
    app = _app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=_settled(app, "disk"))
