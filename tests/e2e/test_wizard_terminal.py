"""The wizard in a real terminal: tmux, send-keys, capture-pane after every action.

Written against the failures users met in tmux: Back left the previous step drawn,
ctrl+o crashed after Checks, an invalid field was dropped on Next. Every step is recognised by
text only that step shows, so a stale frame (the old step still drawn) fails the wait.
"""

from __future__ import annotations

import re

import pytest

from tests.e2e.conftest import SIZES

STEPS = ["checks", "model", "image", "hyperparams", "launch", "monitor"]
# Text only that step's body shows (at both sizes), so a stale frame never matches.
MARK: dict[str, re.Pattern[str]] = {
    "checks": re.compile(r"\d+ ok\b"),
    "model": re.compile(r"Training data"),
    "image": re.compile(r"verdict|in a Python venv"),
    "hyperparams": re.compile(r"Model and data"),
    "launch": re.compile(r"Runs go to"),
    "monitor": re.compile(r"No run to monitor"),
}
NEXT, BACK = "C-n", "C-b"


def _only(step: str):  # type: ignore[no-untyped-def]
    """The step's mark is on screen and no other step's is."""

    def check(screen: str) -> bool:
        if not MARK[step].search(screen):
            return False
        return not any(MARK[other].search(screen) for other in STEPS if other != step)

    return check


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_forward_through_every_step_and_back_to_checks_from_each(start, size) -> None:  # type: ignore[no-untyped-def]
    pane = start("--preset", "tiny-cpu", size=size)
    pane.wait_for(_only("checks"), timeout=60)
    for index, step in enumerate(STEPS[1:], start=1):
        pane.send(NEXT)
        pane.wait_for(_only(step))
        for back in reversed(STEPS[:index]):  # all the way back, one step at a time
            pane.send(BACK)
            pane.wait_for(_only(back))
        for forward in STEPS[1 : index + 1]:
            pane.send(NEXT)
            pane.wait_for(_only(forward))
    assert not pane.dead()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_open_a_preset_from_every_step(start, size) -> None:  # type: ignore[no-untyped-def]
    pane = start("--preset", "tiny-cpu", size=size)
    pane.wait_for(_only("checks"), timeout=60)
    for index, step in enumerate(STEPS):
        if index:
            pane.send(NEXT)
            pane.wait_for(_only(step))
        pane.send("C-o")
        pane.wait_for("Open a preset")
        pane.send("Enter")  # the first shipped preset: tiny-cpu
        mark = MARK[step]
        pane.wait_for(lambda s, mark=mark: "Open a preset" not in s and bool(mark.search(s)))
        pane.wait_for("Loaded preset tiny-cpu")
    assert not pane.dead()


def test_an_invalid_field_then_next_is_refused_with_the_field_and_rule(start) -> None:  # type: ignore[no-untyped-def]
    pane = start("--preset", "tiny-cpu", size=(120, 40))
    pane.wait_for(_only("checks"), timeout=60)
    for step in ("model", "image", "hyperparams"):
        pane.send(NEXT)
        pane.wait_for(_only(step))
    pane.send("C-p")  # the palette jumps to a field: "Edit field: NAME"
    pane.wait_for("Search for commands")
    pane.type("per_device_train_batch_size")
    pane.wait_for("Edit field: per_device_train_batch_size")
    pane.send("Enter")
    pane.wait_for(lambda s: "Search for commands" not in s)
    pane.send("End", "C-u")
    pane.wait_for("is not a whole number")  # the field is empty now
    pane.type("-4")
    pane.wait_for(re.compile(r"✗.*(greater than|>=|at least|positive)", re.IGNORECASE))
    pane.send(NEXT)
    screen = pane.wait_for("per_device_train_batch_size", timeout=10)
    pane.wait_for(re.compile(r"(can't|cannot|not) leave", re.IGNORECASE))
    assert MARK["hyperparams"].search(screen)
    assert not MARK["launch"].search(pane.capture())
