"""The learning-rate axis of the loss chart labels each row with one tick, whatever the hash seed.

plotext removes duplicate ticks through a set, so it draws them in an order that follows the
process's string hash seed (PYTHONHASHSEED); when two ticks fell on one canvas row (the middle
and the top one in an 80x24 Monitor, whose chart canvas has 2 rows) either label was drawn, and
the Monitor's 80x24 snapshots failed in about one pytest process of three. ``lr_ticks`` keeps
only ticks on distinct rows, so no label is drawn over another and the order does not matter.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from textual_plotext.plot import Plot

from widgets.loss_chart import FRAME_ROWS, lr_ticks

ROOT = Path(__file__).resolve().parents[2]
# The recorded tiny run's learning rate (tests/fixtures/resumeui): 0 at step 1, 3e-3 at step 2.
LR = [0.0, 0.003, 0.0029912, 0.0029649, 0.0029215, 0.0028614, 0.0027853, 0.0026941, 0.002589]
LOSS = [6.2441, 6.2428, 6.156, 5.899, 5.8412, 5.7371, 5.5105, 5.5316, 5.3761]


def right_labels(height: int, width: int = 46) -> tuple[list[str], list[str]]:
    """(the labels given, the labels plotext drew) for the chart as LossChart builds it."""
    plt = Plot()
    xs = list(range(1, len(LR) + 1))
    plt.plot(xs, LOSS, marker="braille", color="cyan", label="loss")
    plt.plot(xs, LR, marker="braille", color="magenta", yside="right", label="lr")
    ticks = lr_ticks(min(LR), max(LR), height - FRAME_ROWS)
    labels = [f"{t:.1e}" for t in ticks]
    plt.yticks(ticks, labels, yside="right")  # type: ignore[arg-type]
    plt.xlabel("step")
    plt.plotsize(width, height)
    plt._set_size(width, height)
    drawn = re.findall(r"├([0-9.e+-]+)", re.sub(r"\x1b\[[0-9;]*m", "", plt.build()))
    return labels, drawn


@pytest.mark.parametrize("height", range(5, 13))
def test_every_tick_kept_is_drawn(height: int) -> None:
    """No two kept ticks share a row: each one plotext is given is on the chart."""
    labels, drawn = right_labels(height)
    assert sorted(drawn) == sorted(labels)


def test_a_short_chart_keeps_the_extremes() -> None:
    """2 canvas rows (80x24): the top row says the highest rate, not the middle one."""
    assert right_labels(2 + FRAME_ROWS)[1] == ["3.0e-03", "0.0e+00"]
    assert lr_ticks(0.0, 3e-3, 3) == [0.0, 1.5e-3, 3e-3]
    assert lr_ticks(0.0, 3e-3, 1) == [3e-3]
    assert lr_ticks(2e-5, 2e-5, 2) == [2e-5]


def test_the_labels_do_not_follow_the_hash_seed() -> None:
    """The same chart in processes of different hash seeds draws the same labels (with the
    middle tick kept at 2 rows, seeds 0 and 2 drew 1.5e-03 on the top row, 1 and 3 3.0e-03)."""
    code = "from tests.tui.test_loss_chart_ticks import right_labels; print(right_labels(6)[1])"
    seen = set()
    for seed in range(4):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
            check=True, timeout=60,
        )  # fmt: skip
        seen.add(out.stdout.strip())
    assert seen == {"['3.0e-03', '0.0e+00']"}
