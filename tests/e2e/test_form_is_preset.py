"""The form is the preset, in a real terminal: what a field shows is what runs and is saved.

Fast typists and pastes send a whole burst in one go (``End``, 8×``BSpace``, the new value);
every key of it must land, in order, and the preset saved afterwards must hold exactly the
text on screen. A field showing a rejected value blocks everything that would use the preset.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import SIZES
from tests.e2e.tmux import Pane

ROUNDS = 20
# field -> values typed in turn (each differs from the one before, so a lost key shows)
BURSTS: dict[str, list[str]] = {
    "learning_rate": ["3e-4", "1e-3", "5e-5", "2e-4"],
    "per_device_train_batch_size": ["16", "2", "8", "3"],
    "num_train_epochs": ["5", "12", "7", "2"],
}


def to_hyperparams(pane: Pane) -> None:
    pane.wait_for(re.compile(r"\d+ ok\b"), timeout=60)
    for mark in ("Training data", re.compile(r"verdict|in a Python venv"), "Model and data"):
        pane.send("C-n")
        pane.wait_for(mark)


def focus_field(pane: Pane, path: str) -> None:
    """The palette's "Edit field: NAME" (focus and scroll to it), as a user jumps to a field."""
    pane.send("C-p")
    pane.wait_for("Search for commands")
    pane.type(path)
    pane.wait_for(f"Edit field: {path}")
    pane.send("Enter")
    pane.wait_for(lambda s: "Search for commands" not in s and f"▸ {path}" in s)


def field_text(screen: str, path: str) -> str | None:
    """The text in the field's editor as drawn: beside its label, or under it when narrow."""
    lines = screen.splitlines()
    for number, line in enumerate(lines):
        found = re.search(rf"(?:▸ |  ){re.escape(path)}\b", line)
        if found is None:
            continue
        beside = _first_cell(line[found.end() :])
        if beside or number + 1 >= len(lines):
            return beside
        return _first_cell(lines[number + 1].lstrip(" │"))
    return None


def _first_cell(text: str) -> str:
    """The text up to the first border, toast edge (a ▌ after a space or at the start; a
    checkbox draws ``▐X▌`` itself) or run of spaces: a notification drawn over the form's right
    half must not read as part of the field's value."""
    return re.split(r"\s{2,}|│|(?:^|\s)▌", text.strip())[0].strip()


def shows_value(path: str, value: str):  # type: ignore[no-untyped-def]
    """The field's editor shows exactly ``value``."""
    return lambda screen: field_text(screen, path) == value


def burst(pane: Pane, value: str) -> None:
    pane.send("End", *["BSpace"] * 8, *value)  # one send-keys call: one burst


def save_to_default(pane: Pane, tmp_path: Path) -> dict:  # type: ignore[type-arg]
    target = tmp_path / "tiny-cpu.yaml"
    pane.send("C-s")
    pane.wait_for("Save preset 'tiny-cpu' to:")
    pane.wait_for(str(target)[-40:])  # the default is shown, in full
    existed = target.exists()
    before = target.read_bytes() if existed else b""
    pane.send("Enter")
    if existed:  # saved before: overwriting is asked first, and nothing is written yet
        pane.wait_for("overwrites it")
        assert target.read_bytes() == before
        target.write_text("name: stale\n", encoding="utf-8")  # the next Enter replaces it
        pane.send("Enter")
    pane.wait_for("Saved ")
    pane.wait_for(lambda s: "Save preset 'tiny-cpu' to:" not in s)
    training = yaml.safe_load(target.read_text(encoding="utf-8"))["training"]
    assert isinstance(training, dict)
    return training


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_bursts_into_several_fields_keep_every_key(start, tmp_path: Path, size) -> None:  # type: ignore[no-untyped-def]
    pane = start("--preset", "tiny-cpu", size=size)
    to_hyperparams(pane)
    fields = list(BURSTS)
    last: dict[str, str] = {}
    for round_number in range(ROUNDS):
        path = fields[round_number % len(fields)]
        values = BURSTS[path]
        value = values[(round_number // len(fields)) % len(values)]
        focus_field(pane, path)
        burst(pane, value)
        pane.wait_for(shows_value(path, value))
        last[path] = value
    saved = save_to_default(pane, tmp_path)
    assert saved["learning_rate"] == float(last["learning_rate"])
    assert saved["per_device_train_batch_size"] == int(last["per_device_train_batch_size"])
    assert saved["num_train_epochs"] == float(last["num_train_epochs"])


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_rejected_value_blocks_run_all_save_and_tune(
    start, home: Path, tmp_path: Path, size
) -> None:  # type: ignore[no-untyped-def]
    pane = start("--preset", "tiny-cpu", size=size)
    to_hyperparams(pane)
    focus_field(pane, "learning_rate")
    burst(pane, "1e309")  # passes through valid "1" on the way
    pane.send(*["BSpace"] * 5)
    pane.type("0x10")
    pane.wait_for(shows_value("learning_rate", "0x10"))
    pane.wait_for("✗ '0x10'")

    pane.send("C-r")
    pane.wait_for("Not done: Run all")
    assert "Run all steps for" not in pane.capture()
    pane.send("C-s")
    pane.wait_for("Not done: Save")
    assert "Save preset" not in pane.capture()
    pane.send("F5")
    pane.wait_for("Not done: Tune")
    pane.send("C-p")
    pane.wait_for("Search for commands")
    pane.type("Run all steps")
    pane.wait_for("Run all steps (replay")
    pane.send("Enter")
    pane.wait_for(lambda s: "Search for commands" not in s and "Run all steps for" not in s)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())

    # the focus went back to the field: the user types the fix straight away
    burst(pane, "2e-4")
    pane.wait_for(shows_value("learning_rate", "2e-4"))
    saved = save_to_default(pane, tmp_path)
    assert saved["learning_rate"] == 2e-4
    saved = save_to_default(pane, tmp_path)  # a second save asks before overwriting
    assert saved["learning_rate"] == 2e-4
