"""The wizard in Simplified Chinese (docs/i18n.md): the Checks step (the CPU-box results of
``test_checks_snapshot``, recorded in Chinese: ``run_checks`` under ``set_language('zh_CN')``) and the Hyperparameters step, at 120x40 and 80x24, and the Launch confirmation at 80x24 — CJK text is two
cells wide, so the narrow terminal is where a translation would be cut. Plus the palette's live
language switch, Chinese -> English -> Chinese, on a running App."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets._footer import FooterKey

import backend.images
import backend.images.build
import backend.planner.gpu as planner_gpu
import screens.checks
from backend.checks import CheckResult
from backend.i18n import current_language, set_language
from backend.preset import load_preset
from tests.snapshots.test_checks_snapshot import RECORDED, _settled
from tests.snapshots.test_hyperparams_snapshot import _planned_for
from tests.snapshots.test_launch_snapshot import confirming
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from widgets.step_indicator import StepIndicator

RECORDED_ZH: Path = RECORDED.with_suffix(".zh.json")


def _replay_zh(
    preset: Any,
    on_result: Callable[[CheckResult], object] | None = None,
    cancel: threading.Event | None = None,
    **_: Any,
) -> list[CheckResult]:
    checks = json.loads(RECORDED_ZH.read_text(encoding="utf-8"))["checks"]
    results = [CheckResult.model_validate(c) for c in checks]
    for result in results:
        if on_result is not None:
            on_result(result)
    return results


@pytest.fixture(autouse=True)
def _chinese(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(screens.checks, "run_checks", _replay_zh)
    monkeypatch.setattr(planner_gpu, "detect_local", lambda: None)
    # as test_launch_snapshot: a fixed runs dir and a pinned environment image tag
    monkeypatch.setenv("TRAINWIZ_HOME", "/tmp/trainwiz-snapshot-home")
    pinned = lambda preset, host=None: "trainwiz-env:0123456789abcdef"  # noqa: E731
    monkeypatch.setattr(backend.images.build, "env_image_tag", pinned)
    monkeypatch.setattr(backend.images, "env_image_tag", pinned, raising=False)
    set_language("zh_CN")
    yield
    set_language("en")


def _checks_app() -> TrainwizApp:
    return TrainwizApp(load_preset("vicuna-7b-4xa100-40g"), "vicuna-7b-4xa100-40g")


def _hyperparams_app() -> TrainwizApp:
    return TrainwizApp(
        load_preset("vicuna-7b-4xa100-40g"), "vicuna-7b-4xa100-40g", start_step="hyperparams"
    )


def test_zh_checks_120x40(snap_compare: Any) -> None:
    app = _checks_app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=_settled(app, "disk"))


def test_zh_checks_80x24(snap_compare: Any) -> None:
    app = _checks_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=_settled(app, "disk"))


def test_zh_hyperparams_120x40(snap_compare: Any) -> None:
    app = _hyperparams_app()
    assert snap_compare(app, terminal_size=(120, 40), run_before=_planned_for(app, "a100-40g"))


def test_zh_hyperparams_80x24(snap_compare: Any) -> None:
    app = _hyperparams_app()
    assert snap_compare(app, terminal_size=(80, 24), run_before=_planned_for(app, "a100-40g"))


def test_zh_launch_confirm_80x24(snap_compare: Any) -> None:
    app = TrainwizApp(
        load_preset("vicuna-7b-4xa100-40g"), "vicuna-7b-4xa100-40g", start_step="launch"
    )

    assert snap_compare(app, terminal_size=(80, 24), run_before=confirming)


def _footer_words(app: TrainwizApp) -> set[str]:
    return {key.description for key in app.screen.query(FooterKey)}


async def _footer_shows(pilot: Pilot[Any], words: set[str]) -> None:
    """The footer recomposes in the new language a frame or more later (more under load)."""
    app: Any = pilot.app
    await pilot_until(
        pilot,
        lambda: words <= _footer_words(app),
        what=f"the footer to show {sorted(words)}",
        timeout=20,
        seen=lambda: sorted(_footer_words(app)),
    )


async def test_palette_language_switch_is_live() -> None:
    app = _checks_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _settled(app)(pilot)
        assert {"下一步", "退出", "重新运行"} <= _footer_words(app)
        assert "检查" in str(app.screen.query_one(StepIndicator).render())

        screen = app.screen
        assert isinstance(screen, screens.checks.ChecksScreen)
        results = screen.results
        app.action_switch_language()
        await _footer_shows(pilot, {"Next", "Quit", "Re-run"})
        assert current_language() == "en"
        assert screen.results is results and not screen.running  # words only: no re-run
        status = str(screen.query_one("#checks-status").render())
        assert "Disabled here" in status and "本机禁用" not in status
        assert {"Next", "Quit", "Re-run"} <= _footer_words(app)
        assert "1 Checks" in str(app.screen.query_one(StepIndicator).render())
        assert "preset: vicuna-7b-4xa100-40g" in app.sub_title

        app.action_switch_language()
        await _footer_shows(pilot, {"下一步"})
        assert current_language() == "zh_CN"
        assert "下一步" in _footer_words(app)
