"""Pilot tests of the Image step: real catalog, real compatibility, fixed machine facts."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from backend.images.host import Gpu, HostGpus
from backend.preset import load_preset
from screens.image import ImageScreen
from tests.waiting import pilot_until
from tui.app import TrainwizApp

SEED_HOST = HostGpus("535.54.03", "12.2", [Gpu("NVIDIA A100-SXM4-80GB", (8, 0))] * 8, 1 << 40, 128)
H200 = HostGpus("580.159.04", "13.0", [Gpu("NVIDIA H200", (9, 0))], 2 << 40, 16)


def text_of(screen: ImageScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def surveyed(pilot: Pilot[Any], screen: ImageScreen, reasons: str = "") -> None:
    """Wait for the survey of the images against the machine, and for the reasons pane to
    show ``reasons``."""
    await pilot_until(
        pilot,
        lambda: screen.survey is not None and reasons in text_of(screen, "#image-reasons"),
        what=f"the image survey, with {reasons!r} in the reasons pane",
        timeout=30,
        seen=lambda: (text_of(screen, "#image-host"), text_of(screen, "#image-reasons")),
    )


@pytest.fixture()
def seed_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageScreen, "HOST_OVERRIDE", SEED_HOST)
    monkeypatch.setattr(ImageScreen, "INCLUDE_LOCAL", False)


async def test_seed_image_on_seed_server(seed_machine: None) -> None:
    app = TrainwizApp(load_preset("vicuna-13b-v1.3-8xa100"), "seed", start_step="image")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ImageScreen)
        await surveyed(pilot, screen, reasons="(the preset's image)")
        host = text_of(screen, "#image-host")
        assert "driver 535.54.03 · CUDA ≤ 12.2 · 8× NVIDIA A100-SXM4-80GB (sm80)" in host
        assert "suggested: pytorch/pytorch:2.7.1-cuda11.8-cudnn9-devel" in host
        reasons = text_of(screen, "#image-reasons")
        assert reasons.startswith(
            "pytorch/pytorch:2.0.1-cuda11.7-cudnn8-devel  (the preset's image)"
        )
        assert "driver 535.54.03 (CUDA ≤ 12.2) runs CUDA 11.7" in reasons
        table = screen.query_one(DataTable)
        shown = table.row_count
        assert screen.survey is not None and shown < len(screen.survey.rows)
        await pilot.press("a")
        assert table.row_count == len(screen.survey.rows)


async def test_choosing_an_image_updates_the_preset(seed_machine: None) -> None:
    app = TrainwizApp(load_preset("vicuna-13b-v1.3-8xa100"), "seed", start_step="image")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ImageScreen)
        await surveyed(pilot, screen)
        table = screen.query_one(DataTable)
        table.focus()
        table.move_cursor(row=0)
        await pilot.pause()
        first = screen._visible_rows()[0].image.ref
        await pilot.press("enter")
        await pilot_until(
            pilot,
            lambda: (
                app.preset.environment.image == first
                and "(the preset's image)" in text_of(screen, "#image-reasons")
            ),
            what=f"the preset to take {first} and the reasons pane to say so",
            timeout=20,
            seen=lambda: (app.preset.environment.image, text_of(screen, "#image-reasons")),
        )
        assert app.preset.environment.image == first
        assert "(the preset's image)" in text_of(screen, "#image-reasons")


async def test_h200_flags_the_seed_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageScreen, "HOST_OVERRIDE", H200)
    monkeypatch.setattr(ImageScreen, "INCLUDE_LOCAL", False)
    app = TrainwizApp(load_preset("vicuna-13b-v1.3-8xa100"), "seed", start_step="image")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ImageScreen)
        await surveyed(pilot, screen, reasons="✗ Hopper")
        reasons = text_of(screen, "#image-reasons")
        assert "✗ Hopper (sm90) needs CUDA ≥ 11.8; image has 11.7" in reasons
        assert screen.survey is not None and screen.survey.suggestion is not None
