"""The Image step building for real: a failing environment build shows its error line and finding."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import RichLog

from backend.images.build import BuildResult
from screens.dialogs import ConfirmDialog
from screens.image import ImageScreen
from tests.integration.test_images_docker import docker_tiny
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
        for _ in range(100):
            if screen.survey is not None:
                break
            await pilot.pause(0.05)
        await pilot.press("b")
        for _ in range(100):  # a build asks first (what runs, where)
            if isinstance(app.screen, ConfirmDialog):
                break
            await pilot.pause(0.05)
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        for _ in range(1200):  # a cold build (no layer cache) takes minutes on two cores
            if screen.last_build is not None:
                break
            await pilot.pause(0.5)
        result = screen.last_build
        assert isinstance(result, BuildResult) and not result.ok
        await pilot.pause()
        text = log_text(screen)
        assert f"line {result.error_line_no}: " in text
        assert "nvcc" in (result.error_line or "") or "CUDA_HOME" in (result.error_line or "")
        assert "flash_attn_build: No CUDA compiler (nvcc) in this image" in text
        assert "[" in text and "/" in text and "FROM trainwiz-base:bookworm" in text
