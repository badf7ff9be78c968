"""The Launch step shows the planner's verdict for this machine (the launch's own gate,
backend/runs/plangate.py) and launches a preset predicted not to fit only through a
confirmation that says so ("Launch anyway", the CLI's --ignore-plan).

Before: the Launch step showed the plan's commands and launched whatever the plan predicted;
the run ran out of GPU memory in step 1. This machine has no GPU: the NVML snapshot that the
checks and ``detect_local`` read is a stand-in H100 (tests/backend/test_plan_gate.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import backend.checks.gpu
import backend.nvml
import screens.launch
from backend.errors import BadInput
from backend.planner import hostram
from screens.dialogs import ConfirmDialog
from screens.launch import LaunchScreen
from tests.backend.test_plan_gate import GIB, gpu_preset, h100_snapshot
from tests.waiting import pilot_until
from tui.app import TrainwizApp


@pytest.fixture()
def launched(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """One H100 and 512 GiB here; launch() records its keywords and refuses (no run starts)."""
    snap = h100_snapshot()
    monkeypatch.setattr(backend.nvml, "snapshot", lambda: snap)
    monkeypatch.setattr(backend.checks.gpu, "snapshot", lambda: snap)
    monkeypatch.setattr(hostram, "read_meminfo", lambda path="/proc/meminfo": 512 * GIB)
    calls: list[dict[str, Any]] = []

    def stand_in(preset: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        raise BadInput("stand-in launch: nothing started")

    monkeypatch.setattr(screens.launch, "launch", stand_in)
    return calls


async def test_a_preset_that_does_not_fit_is_launched_only_anyway(
    tmp_path: Path, launched: list[dict[str, Any]]
) -> None:
    preset = gpu_preset(tmp_path)  # a full fine-tune of 8B params on one H100
    app = TrainwizApp(preset, preset.name, start_step="launch")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await pilot_until(pilot, lambda: screen.plan is not None, what="the plan", timeout=30,
                          seen=lambda: str(screen.query_one("#launch-status").render()))  # fmt: skip
        summary = str(screen.query_one("#launch-summary").render())
        assert "Plan for this machine: DOES NOT FIT: predicted peak " in summary
        assert "'trainwiz tune gate-test' (or Tune, F5 on the Hyperparameters step)" in summary
        await pilot.press("l")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmDialog),
                          what="the confirmation", timeout=20)  # fmt: skip
        body = str(app.screen.query_one("#confirm-summary").render())
        assert "Launch gate-test anyway?" in body
        assert "WARNING the plan for this machine: DOES NOT FIT" in body
        assert "Launch anyway (y)" in str(app.screen.query_one("#confirm-yes").render())
        await pilot.press("y")
        await pilot_until(pilot, lambda: bool(launched), what="the launch", timeout=20)
        assert launched == [{"ignore_plan": True}]  # the user's explicit override


async def test_a_preset_that_fits_says_so_and_launches_through_the_gate(
    tmp_path: Path, launched: list[dict[str, Any]]
) -> None:
    tiny = {"source": "tiny", "dir": "@home/models/tiny-llama",
            "tiny": {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "vocab_size": 512,
                     "max_position_embeddings": 512}}  # fmt: skip
    preset = gpu_preset(tmp_path, model=tiny, model_max_length=256)
    app = TrainwizApp(preset, preset.name, start_step="launch")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, LaunchScreen)
        await pilot_until(pilot, lambda: screen.plan is not None, what="the plan", timeout=30)
        assert "Plan for this machine: FITS" in str(screen.query_one("#launch-summary").render())
        await pilot.press("l")
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmDialog),
                          what="the confirmation", timeout=20)  # fmt: skip
        assert "Launch gate-test?" in str(app.screen.query_one("#confirm-summary").render())
        await pilot.press("y")
        await pilot_until(pilot, lambda: bool(launched), what="the launch", timeout=20)
        assert launched == [{"ignore_plan": False}]  # the gate still judges it at launch
