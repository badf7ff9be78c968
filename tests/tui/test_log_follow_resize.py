"""A following log keeps its newest line in view when its pane loses rows.

The Monitor's run header names the world size a poll after the state, and at 80 columns that
wraps it to a second row, taking one from the log; when the log's lines had landed first, the
view kept its offset and showed the line before the last (the 80x24 Resume snapshots failed so
on a loaded machine). A paused log keeps the lines it shows.
"""

from __future__ import annotations

from textual.app import App, ComposeResult

from backend.monitor import LogBatch, classify_batch
from widgets.log_pane import LogPane

LINES = [f"line {n}" for n in range(1, 61)]


class PaneApp(App[None]):
    def compose(self) -> ComposeResult:
        yield LogPane(id="log")


async def test_following_log_stays_at_its_end_when_it_shrinks() -> None:
    app = PaneApp()
    async with app.run_test(size=(80, 20)) as pilot:
        pane = app.query_one(LogPane)
        batch = LogBatch(LINES, list(range(1, 61)), eof=True)
        pane.add_batch(classify_batch(batch, None))
        await pilot.pause()
        view = pane.view
        assert view.max_scroll_y > 0 and view.scroll_offset.y == view.max_scroll_y

        await pilot.resize_terminal(80, 14)  # six rows fewer: the end would fall below
        await pilot.pause()
        assert view.scroll_offset.y == view.max_scroll_y
        assert view.max_scroll_y == len(LINES) - view.scrollable_content_region.height

        pane.action_toggle_follow()  # paused: what it shows stays put
        top = view.scroll_offset.y
        await pilot.resize_terminal(80, 10)
        await pilot.pause()
        assert view.scroll_offset.y == top
