"""The Image step building for real: a failing environment build shows its error line and finding."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import RichLog

from backend.images.build import BuildResult
from screens.dialogs import ConfirmDialog
from screens.image import ImageScreen
from tests.integration.test_images_docker import docker_tiny
from tests.waiting import pilot_until
from tui.app import TrainwizApp

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def log_text(screen: ImageScreen) -> str:
    log = screen.query_one("#image-log", RichLog)
    return "\n".join("".join(seg.text for seg in strip) for strip in log.lines)


async def test_failed_build_is_diagnosed_on_screen() -> None:
    preset = docker_tiny(flash_attn={"install": "always"})  # flash-attn onto a CPU image: no nvcc
    app = TrainwizApp(preset, "tiny-docker-env", start_step="image")
    async with app.run_test(size=(120, 40)) as pilot:
        screen: Any = app.screen
        assert isinstance(screen, ImageScreen)
        await pilot_until(
            pilot,
            lambda: screen.survey is not None,
            what="the image survey",
            timeout=30,
            seen=lambda: str(screen.query_one("#image-host").render()),
        )
        await pilot.press("b")
        await pilot_until(  # a build asks first (what runs, where)
            pilot,
            lambda: isinstance(app.screen, ConfirmDialog),
            what="the build's confirmation",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        await pilot_until(
            pilot,
            lambda: screen.last_build is not None,
            what="the build to end",
            timeout=600,  # a cold build (no layer cache) takes minutes on two cores
            seen=lambda: log_text(screen)[-400:],
        )
        result = screen.last_build
        assert isinstance(result, BuildResult) and not result.ok
        await pilot_until(
            pilot,
            lambda: "flash_attn_build: No CUDA compiler" in log_text(screen),
            what="the build's finding in the log",
            timeout=20,
            seen=lambda: log_text(screen)[-400:],
        )
        text = log_text(screen)
        assert f"line {result.error_line_no}: " in text
        assert "nvcc" in (result.error_line or "") or "CUDA_HOME" in (result.error_line or "")
        assert "flash_attn_build: No CUDA compiler (nvcc) in this image" in text
        assert "[" in text and "/" in text and "FROM trainwiz-base:bookworm" in text
