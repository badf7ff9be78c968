"""The throughput panel's progress line fits its content area at any step count.

The line ("step 1234/5000 ░░░… 25%") was sized for the panel's outer width (34 columns) while
the text lies in 32 (the panel's padding), and its bar kept one length whatever the step
numbers took: with a long "step N/MAX" it wrapped onto a second row, pushing the panel's figures
down.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from rich.cells import cell_len
from textual.app import App, ComposeResult

from backend.monitor.tracker import ThroughputSummary
from widgets.throughput import ThroughputMeter, render_summary

RUNNING = ThroughputSummary(
    source="metrics", step=1, max_steps=5, step_time_s=0.5, tokens_per_s=1000.0,
    tokens_nonpad_per_s=800.0, samples_per_s=4.0, eta_s=60.0,
)  # fmt: skip
STEPS = [(1, 5), (12, 150), (1234, 5000), (99999, 100000), (1234567, 9999999)]


def progress_line(text: str) -> str:
    return next(line for line in text.split("\n") if line.startswith("step "))


@pytest.mark.parametrize("width", [30, 32, 40])
@pytest.mark.parametrize(("step", "max_steps"), STEPS)
def test_the_progress_line_fits_the_width_it_is_given(
    step: int, max_steps: int, width: int
) -> None:
    summary = replace(RUNNING, step=step, max_steps=max_steps)
    line = progress_line(render_summary(summary, "running", width).plain)
    assert cell_len(line) <= width, (width, line)
    assert "░" in line or "█" in line  # still a bar


class OneMeter(App[None]):
    def compose(self) -> ComposeResult:
        yield ThroughputMeter(id="meter")


async def test_the_panel_keeps_its_height_at_a_long_step_count() -> None:
    app = OneMeter()
    async with app.run_test(size=(80, 24)) as pilot:
        meter = app.query_one(ThroughputMeter)
        heights = []
        for step, max_steps in STEPS:
            meter.show(replace(RUNNING, step=step, max_steps=max_steps), "running")
            await pilot.pause()
            heights.append(meter.content_size.height)
        assert len(set(heights)) == 1, list(zip(STEPS, heights, strict=True))


def test_the_bar_keeps_its_length_through_the_run() -> None:
    bars = set()
    for step in (1, 9, 10, 99, 100, 999, 1000):
        line = progress_line(
            render_summary(replace(RUNNING, step=step, max_steps=1000), "", 32).plain
        )
        bars.add(line.count("█") + line.count("░"))
        assert cell_len(line) == 32, line
    assert len(bars) == 1, bars
