"""Snapshots of the monitor on the recorded H200 run (2 GPUs, finished), at 120x40 and 80x24."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from tests.tui.test_monitor import LOG_2G, build, expected_log_lines, settle


def _settled(app: Any) -> Any:
    async def run_before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        await settle(pilot, app, len(expected_log_lines(LOG_2G)))

    return run_before


def test_monitor_120x40(snap_compare: Any, tmp_path: Path) -> None:
    app = build(tmp_path)
    assert snap_compare(app, terminal_size=(120, 40), run_before=_settled(app))


def test_monitor_80x24(snap_compare: Any, tmp_path: Path) -> None:
    app = build(tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=_settled(app))


def test_monitor_flag_jump_120x40(snap_compare: Any, tmp_path: Path) -> None:
    log = tmp_path / "oom.log"
    oom = Path(__file__).resolve().parents[1] / "fixtures/logcorpus/cuda_oom"
    log.write_text(LOG_2G.read_text() + (oom / "fastchat-1781-vicuna7b-a100-40g.log").read_text())
    app = build(tmp_path, log)

    async def run_before(pilot: Pilot) -> None:  # type: ignore[type-arg]
        await settle(pilot, app, len(expected_log_lines(log)))
        await pilot.press("right_square_bracket")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)
