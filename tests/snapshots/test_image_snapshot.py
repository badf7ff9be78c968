"""Snapshots of the Image step: the seed preset judged on the seed's server and on the H200.

Machine facts are pinned (driver/CUDA/GPUs as the seed and nvidia-smi on the H200 report them)
and the Docker daemon is left out, so only the catalog and the compatibility rules are on screen.
"""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable

from backend.preset import load_preset
from screens.image import ImageScreen
from tests.tui.test_image import H200, SEED_HOST
from tests.waiting import pilot_until
from tui.app import TrainwizApp


async def _surveyed(pilot: Pilot[Any]) -> None:
    screen = pilot.app.screen
    assert isinstance(screen, ImageScreen)
    await pilot_until(
        pilot,
        lambda: screen.survey is not None,
        what="the image survey",
        timeout=30,
        seen=lambda: str(screen.query_one("#image-host").render()),
    )
    assert screen.survey is not None
    # The table lays out its rows once the app is idle again (its column widths are the
    # screen's own): the picture waits until the table holds the rows and the header.
    table = screen.query_one(DataTable)
    await pilot_until(
        pilot,
        lambda: table.row_count > 0 and table.virtual_size.height >= table.row_count + 1,
        what="the image table laid out (its virtual height covering its rows and header)",
        timeout=30,
        seen=lambda: f"{table.row_count} rows, virtual size {table.virtual_size}",
    )
    await pilot.pause()


def test_image_step_seed_server_120x40(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageScreen, "HOST_OVERRIDE", SEED_HOST)
    monkeypatch.setattr(ImageScreen, "INCLUDE_LOCAL", False)
    app = TrainwizApp(load_preset("vicuna-13b-v1.3-8xa100"), "seed", start_step="image")
    assert snap_compare(app, terminal_size=(120, 40), run_before=_surveyed)


def test_image_step_h200_80x24(snap_compare: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ImageScreen, "HOST_OVERRIDE", H200)
    monkeypatch.setattr(ImageScreen, "INCLUDE_LOCAL", False)
    app = TrainwizApp(load_preset("vicuna-13b-v1.3-8xa100"), "seed", start_step="image")
    assert snap_compare(app, terminal_size=(80, 24), run_before=_surveyed)
