"""Long paths in the form, in a real terminal: cut in the middle, whole when being edited.

An Input scrolled to its cursor showed only a path's end (``…ns-for-the-long-path/train.json``
at 80x24); a path's start says where it is and its end which file. Unfocused, the field shows
both ends around an ellipsis; focused, the row's note shows the whole value (and the editor
edits it as usual).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.preset import load_preset, save_preset
from tests.e2e.conftest import SIZES
from tests.e2e.test_form_is_preset import field_text, focus_field, to_hyperparams

BAR_GLYPHS = "▀▁▂▃▄▅▆▇█▉▊▋▌▍▎▏▐▔▕"  # scrollbars drawn inside the border


def _long_paths(tmp_path: Path) -> tuple[Path, str, str]:
    """tiny-cpu whose data file and output directory sit deep under the test's directory."""
    deep = tmp_path / "datasets" / "conversations-for-the-long-path-test" / "2026-12-01"
    deep.mkdir(parents=True)
    data = deep / "train.json"
    data.write_text('[{"id": "a", "conversations": [{"from": "human", "value": "hi"}, '
                    '{"from": "gpt", "value": "hello"}]}]')  # fmt: skip
    output = str(tmp_path / "outputs" / "a-run-with-a-long-name" / "checkpoints-and-logs")
    preset = load_preset("tiny-cpu")
    training = preset.training.model_copy(update={"data_path": str(data), "output_dir": output})
    path = save_preset(preset.model_copy(update={"training": training}), tmp_path / "long.yaml")
    return path, str(data), output


def _form_column(screen: str) -> str:
    """The form's column (between its borders), each line stripped, joined without breaks:
    a value the note wrapped reads whole again."""
    parts = []
    for line in screen.splitlines():
        cells = line.split("│")
        if len(cells) >= 3:
            parts.append(cells[1].strip().strip(BAR_GLYPHS).strip())
    return "".join(parts)


def _cut_in_the_middle(field: str, value: str):  # type: ignore[no-untyped-def]
    """The field's editor shows the value's start and its end around one ellipsis."""

    def check(screen: str) -> bool:
        head, sep, tail = (field_text(screen, field) or "").partition("…")
        ends = value.startswith(head) and value.endswith(tail)
        return bool(sep) and len(head) >= 4 and len(tail) >= 8 and ends

    return check


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_long_path_shows_both_ends_and_whole_when_focused(  # type: ignore[no-untyped-def]
    start, tmp_path: Path, size: tuple[int, int]
) -> None:
    preset, data, output = _long_paths(tmp_path)
    pane = start("--preset", str(preset), size=size)
    to_hyperparams(pane)
    # each path field, then the field below it (so the row stays on screen at 80x24 too)
    for field, value, below in (("data_path", data, "chat_template"),
                                ("output_dir", output, "cache_dir")):  # fmt: skip
        if f"▸ {field}" not in pane.capture():
            focus_field(pane, field)
        # focused: the whole value in the row's note (wrapped there, read back joined)
        screen = pane.wait_for(lambda s, v=value: v in _form_column(s), timeout=30)
        assert "whole value:" in _form_column(screen), screen
        focus_field(pane, below)
        # unfocused: its start and its end (the file's name), never just a tail
        screen = pane.wait_for(_cut_in_the_middle(field, value), timeout=30)
        assert value not in _form_column(screen)  # cut, not wrapped
    pane.send("C-q")
    pane.wait_dead(timeout=30)
