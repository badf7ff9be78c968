"""Small things a user meets in a real terminal: keymap errors, checkbox states, blocked
reasons at 80x24, and the Monitor on a finished run (a summary, never an ETA)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from backend.monitor import HfLogParser, StepRecord
from tests.e2e.conftest import SIZES
from tests.e2e.test_form_is_preset import field_text, focus_field, to_hyperparams
from tests.tui.test_monitor import LOG_2G, make_run
from tests.tui.test_monitor_metrics import write_metrics

CHECKS = re.compile(r"\d+ ok\b")


def toasts(screen: str) -> str:
    """The notifications' text run together (a long path wraps inside the toast at 80x24)."""
    parts = [line.rsplit("▌", 1)[1] for line in screen.splitlines() if "▌" in line]
    return "".join(part.strip().rstrip("│╯").strip() for part in parts)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_bad_keymap_line_is_named_and_the_rest_applies(start, home: Path, size) -> None:  # type: ignore[no-untyped-def]
    (home / "keymap.yaml").write_text(
        "# my keys\napp.previous_step: [f8\napp.next_step: f9\n", encoding="utf-8"
    )
    pane = start("--preset", "tiny-cpu", size=size)
    pane.wait_for(lambda s: "keymap.yaml:2:" in toasts(s), timeout=60)  # that line, not the next
    pane.wait_for(CHECKS, timeout=60)
    pane.send("F9")  # line 3 still applies
    pane.wait_for("Training data")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_checkbox_states_read_differently(start, size) -> None:  # type: ignore[no-untyped-def]
    pane = start("--preset", "tiny-cpu", size=size)
    to_hyperparams(pane)
    focus_field(pane, "packing")
    before = field_text(pane.capture(), "packing")
    assert before is not None and before.endswith(("on", "off")), pane.last
    pane.send("Space")
    after = "off" if before.endswith("on") else "on"
    pane.wait_for(lambda s: (field_text(s, "packing") or "").endswith(after))
    assert before != field_text(pane.last, "packing")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_blocked_steps_reason_and_fix_are_shown_in_full(start, size) -> None:  # type: ignore[no-untyped-def]
    pane = start("--preset", "vicuna-13b-v1.3-8xa100", size=size)
    pane.wait_for(CHECKS, timeout=60)
    pane.wait_for("Disabled here", timeout=90)
    for _ in range(4):
        pane.send("C-n")
    pane.wait_for("Runs go to", timeout=30)  # the Launch step
    # the check that disables Launch may land after the first "Disabled here" (another step's)
    pane.wait_for(lambda s: "is disabled on this machine" in s.split("Runs go to")[0], timeout=60)
    # the reasons, the whole fix and the closing sentence: nothing cut (wrapped lines joined)
    # (the checks land one by one: wait for the last of these, not a fixed time)
    whole = ("ram: needs", "sudo apt-get install -y cuda-drivers", "You can still look and plan.")
    pane.wait_for(lambda s: all(w in " ".join(s.split("Runs go to")[0].split()) for w in whole))
    banner = " ".join(pane.last.split("Runs go to")[0].split())
    assert banner.index("nvidia_driver:") < banner.index("ram: needs"), banner  # checks' order


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_finished_run_shows_a_final_summary_and_no_eta(start, home: Path, size) -> None:  # type: ignore[no-untyped-def]
    run = make_run(home)
    recorded = [e for e in HfLogParser().parse_file(LOG_2G) if isinstance(e, StepRecord)]
    from tests.tui.test_monitor_metrics import step_line

    steps = [step_line(r.step, 10, r.loss, r.learning_rate, r.grad_norm) for r in recorded]  # type: ignore[arg-type]
    write_metrics(run, steps)
    real = sum(s["tokens_nonpad"] for s in steps)
    pane = start("attach", run.name, size=size)
    screen = pane.wait_for("Final summary", timeout=60)
    losses = [s["loss"] for s in steps]
    pane.wait_for(f"loss {losses[0]:.4f} → {losses[-1]:.4f}")
    # wall time: the first step's start to the last step's end (10 x 0.2546 s); real tok/s:
    # the run's real tokens over its steps' time (backend/monitor/figures.py)
    screen = pane.wait_for("wall time 3s")
    spent = sum(s["step_time_s"] for s in steps)
    assert f"real tok/s {real / spent:,.0f}" in screen, screen
    assert "ETA" not in screen
