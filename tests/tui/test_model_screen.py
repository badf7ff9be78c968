"""Pilot tests of the Model step: real validation, real data check, a real download."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, ProgressBar, Select, Static

from backend.preset import load_preset
from screens.model import ModelScreen
from tests.backend.hubserver import FakeHub, Repo, write_llama_dir
from tests.backend.test_model_validate import shared_tiny
from tests.waiting import pilot_until
from tui.app import TrainwizApp


def text_of(screen: ModelScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def shown(screen: ModelScreen) -> str:
    """What the Model step says: its status line and both reports."""
    return (
        f"status {text_of(screen, '#model-status')!r}, "
        f"model {text_of(screen, '#model-report')!r}, data {text_of(screen, '#data-report')!r}"
    )


def busy(screen: ModelScreen) -> list[str]:
    """The screen's workers still running (fetch, validation, data check)."""
    return [w.group for w in screen.app.workers if w.node is screen and not w.is_finished]


@pytest.fixture()
def tiny_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = Path(os.environ["TRAINWIZ_HOME"]) / "models" / "tiny-llama"
    shutil.copytree(shared_tiny(tmp_path_factory), target)
    return target


async def test_tiny_model_validated_and_data_checked_on_arrival(tiny_home: Path) -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="model")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ModelScreen)
        await pilot_until(
            pilot,
            lambda: screen.report is not None and screen.data_report is not None,
            what="the model validated and the data checked",
            timeout=30,
            seen=lambda: shown(screen),
        )
        assert screen.report is not None and screen.report.n_params == 166_208
        assert "parameters 166,208" in text_of(screen, "#model-report")
        assert "200 records" in text_of(screen, "#data-report")
        assert "truncated at 256: 0 (0.0%)" in text_of(screen, "#data-report")
        # nothing was fetched: no bar pulses as if a download ran
        assert not screen.query_one("#model-progress", ProgressBar).display


async def test_download_from_hub_with_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    src = tmp_path / "src"
    n = write_llama_dir(src)
    hub = FakeHub()
    hub.repos["acme/m"] = Repo.from_dir(src)
    hub.start()
    progressed: list[ModelScreen.Progressed] = []

    def hook(message: Any) -> None:
        if isinstance(message, ModelScreen.Progressed):
            progressed.append(message)

    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="model")
    try:
        async with app.run_test(size=(120, 40), message_hook=hook) as pilot:
            screen = app.screen
            assert isinstance(screen, ModelScreen)
            screen.query_one("#model-source", Select).value = "hf"
            screen.query_one("#model-repo", Input).value = "acme/m"
            screen.query_one("#model-dir", Input).value = str(tmp_path / "dst")
            screen.query_one("#model-endpoint", Input).value = hub.url
            await pilot.pause()
            await pilot.press("f")
            # The files come through a worker subprocess (a fresh Python importing
            # huggingface_hub): on a loaded 2-core CI machine that alone takes many seconds.
            await pilot_until(
                pilot,
                lambda: screen.report is not None and screen.report.n_params == n,
                what="the download to end with the model validated",
                timeout=90,
                seen=lambda: (
                    f"status {text_of(screen, '#model-status')!r}, focus {app.focused}, "
                    f"{len(progressed)} progress messages, "
                    f"notes {[n.message for n in app._notifications]}"
                ),
            )
            assert app.preset.model.source == "hf" and app.preset.model.repo == "acme/m"
            assert progressed and progressed[-1].progress.bytes == progressed[-1].progress.total
            assert "Downloaded" in text_of(screen, "#model-status")
            bar = screen.query_one("#model-progress", ProgressBar)
            assert bar.display and bar.percentage == 1.0
            assert (tmp_path / "dst" / "model-00001-of-00002.safetensors").is_file()
    finally:
        hub.stop()


async def test_form_error_is_named_and_nothing_runs(tmp_path: Path) -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="model")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ModelScreen)
        screen.query_one("#model-source", Select).value = "hf"
        screen.query_one("#model-repo", Input).value = ""
        await pilot.pause()
        await pilot.press("f")
        await pilot_until(
            pilot,
            lambda: "source 'hf' needs 'repo'" in text_of(screen, "#model-status"),
            what="the status line to name the form error",
            timeout=20,
            seen=lambda: shown(screen),
        )
        assert "source 'hf' needs 'repo'" in text_of(screen, "#model-status")
        assert app.preset.model.source == "tiny"


async def test_a_late_result_for_the_previous_preset_is_dropped(
    tiny_home: Path, tmp_path: Path
) -> None:
    """A fetch/validation still running when another preset is opened posts its result late; it
    must not paint the old preset's model as this preset's (the messages carry a generation)."""
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="model")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ModelScreen)
        await pilot_until(
            pilot,
            lambda: screen.report is not None,
            what="the model validated",
            timeout=30,
            seen=lambda: shown(screen),
        )
        old_report, old_generation = screen.report, screen.generation
        assert old_report is not None and old_report.ok
        other = load_preset("tiny-cpu")
        other.model.dir = str(tmp_path / "no-model-here")
        app.propose_preset(other)
        await pilot_until(
            pilot,
            lambda: screen.generation == old_generation + 1,
            what="the screen to take the other preset",
            timeout=20,
            seen=lambda: f"generation {screen.generation} (was {old_generation})",
        )
        await pilot_until(  # the new preset's own checks are over: what they set stays
            pilot,
            lambda: "no-model-here" in text_of(screen, "#model-status") and not busy(screen),
            what="the other preset's model checked",
            timeout=30,
            seen=lambda: f"{shown(screen)}, running {busy(screen)}",
        )
        new_report = screen.report
        assert new_report is not old_report
        screen.post_message(ModelScreen.Ready(old_report, "fetched", None, old_generation))
        screen.post_message(ModelScreen.Failed("fetch", "stale failure", old_generation))
        await pilot.pause()  # the screen handles the two messages posted before this returns
        assert screen.report is new_report
        status = text_of(screen, "#model-status")
        assert "Fetched" not in status and "stale failure" not in status
