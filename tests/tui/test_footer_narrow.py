"""The footer at 80 columns: the palette key (docked right) covers the line's last cell.

The Monitor's keys need ~120 cells; at 80 the ones that do not fit run on under the docked
``^p palette`` key. Textual's compact footer gives every key, the docked one too, a right margin
of one cell, so the last cell of the line showed the key underneath: "^p palettet" (the ``t`` of
``alt→``), read by a user as a typo or a key called ``palettet``.
"""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from backend.preset import load_preset
from tests.tui.test_monitor import make_run
from tui.app import TrainwizApp


async def test_the_palette_key_ends_the_footer_line_at_80_columns(tmp_path: Path) -> None:
    app = TrainwizApp(
        load_preset("tiny-cpu"), "tiny-cpu", start_step="monitor", attach_run=make_run(tmp_path)
    )
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        footer = app.screen.query_one(Footer)
        assert footer.virtual_size.width > 80  # the keys overflow under the docked one
        palette = next(k for k in footer.query(FooterKey) if "-command-palette" in k.classes)
        assert palette.region.right == footer.region.right == 80
        line = "".join(s.text for s in app.screen._compositor.render_update(full=True)  # type: ignore[union-attr]
                       .strips[footer.region.y])  # fmt: skip
        assert line.rstrip().endswith("^p palette"), line
