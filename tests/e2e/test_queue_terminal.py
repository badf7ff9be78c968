"""The Queue view in a real terminal, at 120x40 and 80x24: two items queued with the CLI on a
paused queue (no scheduler, nothing trains), F7 lists them with their states and positions and
says the queue is paused, the Launch step's footer offers Add to queue, Escape closes the view."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import SIZES, trainwiz_script
from tests.e2e.tmux import trainwiz_env


def _cli(home: Path, *args: str) -> None:
    done = subprocess.run([trainwiz_script(), *args], env=trainwiz_env(home),
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_f7_lists_the_queue_and_launch_offers_add_to_queue(start, home: Path, size) -> None:  # type: ignore[no-untyped-def]
    _cli(home, "queue", "pause")
    _cli(home, "queue", "add", "tiny-cpu")
    _cli(home, "queue", "add", "tiny-cpu-lora")
    pane = start("--preset", "tiny-cpu", size=size)
    pane.wait_for("Checks", timeout=60)
    pane.send("F7")
    screen = pane.wait_for(lambda s: "Queue paused" in s and "tiny-cpu-lora" in s, timeout=60)
    rows = [line for line in screen.splitlines() if "queued" in line]
    assert len(rows) == 2, screen
    assert "tiny-cpu" in rows[0] and " 1 " in rows[0] and "tiny-cpu-lora" in rows[1], screen
    pane.send("Escape")
    pane.wait_for(lambda s: "Queue paused" not in s, timeout=30)
    for _ in range(4):
        pane.send("C-n")
    pane.wait_for("Runs go to", timeout=60)  # the Launch step
    pane.wait_for("Add to queue", timeout=30)  # its footer, beside Launch
