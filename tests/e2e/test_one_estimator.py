"""One estimator, in a real terminal: the Checks step's disk and RAM needs are the planner's.

The LoRA preset for one 24 GB GPU trains 8.4 M adapter parameters on a frozen bf16 base: a
checkpoint is its adapters and their Adam state (~100 MB), and the host holds the bf16 base
(12.55 GiB). The checks once reckoned 11 full fp32 checkpoints of 7 B (893.6 GiB) and an fp32
copy per rank (26.1 GiB), and blocked Launch on a machine that fits the run.
"""

from __future__ import annotations

import re

import pytest

from backend.checks.sizing import planned_sizes
from backend.preset import load_preset
from tests.e2e.conftest import SIZES

PRESET = "vicuna-7b-lora-1x24g"


def _row(screen: str, label: str) -> str:
    return next((line for line in screen.splitlines() if label in line), "")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_lora_checks_say_the_planners_disk_and_ram(start, size) -> None:  # type: ignore[no-untyped-def]
    planned = planned_sizes(load_preset(PRESET))
    assert planned is not None
    gib = f"{planned.host_ram_bytes / 2**30:.1f} GiB"  # the check's summary rounds to 0.1
    pane = start("--preset", PRESET, "--gpu", "4090", size=size)
    screen = pane.wait_for(re.compile(r"\d+ ok\b"), timeout=60)
    screen = pane.wait_for(
        lambda s: (
            all(
                _row(s, label) and "running" not in _row(s, label)
                for label in ("Host RAM", "Disk space")
            )
            and "Disabled here" in s
        ),
        timeout=60,
    )
    # not blocking (the old reckoning's 893.6 GiB failed it); ✓ or a headroom warning is this
    # machine's free disk against the planner's figure, which the detail below shows
    assert "✗" not in _row(screen, "Disk space"), screen
    ram = _row(screen, "Host RAM")
    assert "✓" in ram and "needs 12.6 G" in ram and gib.startswith("12.6"), screen
    pane.send(*["Down"] * 7)  # the row's detail: the planner's own figure
    detail = pane.wait_for("planner's host RAM")
    assert f"{planned.host_ram_bytes / 2**30:.2f}" in detail, detail
    disabled = " ".join(
        line for line in screen.splitlines() if "(by " in line or "Disabled" in line
    )
    assert "disk" not in disabled and "ram" not in disabled.replace("param", ""), screen
    if size == (120, 40):  # the plan pane beside the form says the same host RAM
        for mark in ("Training data", re.compile(r"verdict|in a Python venv"), "Model and data"):
            pane.send("C-n")
            pane.wait_for(mark)
        # the plan's method is the preset's: LoRA's frozen bf16 base (what the host loads, the
        # RAM check's number) and its adapters, never a full fine-tune of 7 B
        plan = pane.wait_for("frozen base bf16")
        base = _row(plan, "frozen base bf16")
        assert f"{planned.host_ram_bytes / 2**30:.2f} GiB" in base, plan
        assert "adapters + grads + adam" in plan and "params fp32" not in plan
