"""The wizard's Queue view (F7, or "Run queue" in the palette) and the Launch step's "Add to
queue" (a): pause the queue from the view, queue the open preset after the confirmation, see it
listed, remove it. The queue stays paused, so no scheduler starts and nothing trains."""

from __future__ import annotations

from typing import Any

from textual.command import CommandPalette
from textual.pilot import Pilot
from textual.widgets import DataTable, OptionList

from backend.preset import load_preset
from backend.queue import db
from screens.dialogs import ConfirmDialog
from screens.queue import QueueScreen
from tests.waiting import pilot_until
from tui.app import TrainwizApp


def _rows(app: TrainwizApp) -> list[tuple[str, ...]]:
    if not isinstance(app.screen, QueueScreen):
        return []
    table = app.screen.query_one("#queue-table", DataTable)
    return [tuple(str(c) for c in table.get_row_at(i)) for i in range(table.row_count)]


def _paused(app: TrainwizApp) -> bool | None:
    listed = getattr(app.screen, "listed", None)
    return None if listed is None else bool(listed["paused"])


async def _queue_view(app: TrainwizApp, pilot: Pilot[Any]) -> QueueScreen:
    await pilot.press("f7")
    await pilot_until(pilot, lambda: _paused(app) is not None, what="the Queue view, read",
                      timeout=20, seen=lambda: type(app.screen).__name__)  # fmt: skip
    assert isinstance(app.screen, QueueScreen)
    return app.screen


async def test_queue_view_pause_add_from_launch_and_remove() -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="launch")
    async with app.run_test(size=(120, 40)) as pilot:
        await _queue_view(app, pilot)
        assert _rows(app) == [] and _paused(app) is False
        await pilot.press("p")  # pause: an empty queue starts no scheduler either way
        await pilot_until(pilot, lambda: _paused(app) is True, what="the queue paused",
                          timeout=20, seen=lambda: _paused(app))  # fmt: skip
        await pilot.press("escape")
        await pilot_until(pilot, lambda: not isinstance(app.screen, QueueScreen),
                          what="the view closed", timeout=20)  # fmt: skip

        await pilot.press("a")  # the Launch step's Add to queue
        await pilot_until(pilot, lambda: isinstance(app.screen, ConfirmDialog),
                          what="the queue's confirmation", timeout=20,
                          seen=lambda: type(app.screen).__name__)  # fmt: skip
        await pilot.press("y")
        await pilot_until(pilot, lambda: _items() == [("tiny-cpu", "queued")],
                          what="the preset queued", timeout=60, seen=_items)  # fmt: skip

        await _queue_view(app, pilot)
        await pilot_until(pilot, lambda: len(_rows(app)) == 1, what="the item listed",
                          timeout=20, seen=lambda: _rows(app))  # fmt: skip
        (row,) = _rows(app)
        assert row[1:5] == ("queued", "tiny-cpu", "cpu", "1")
        await pilot.press("d")
        await pilot_until(pilot, lambda: _rows(app) == [], what="the item removed",
                          timeout=20, seen=lambda: _rows(app))  # fmt: skip
        assert _items() == []


def _items() -> list[tuple[str, str]]:
    conn = db.connect()
    try:
        return [(i.preset_name, i.state) for i in db.items(conn)]
    finally:
        conn.close()


async def test_the_palette_opens_the_queue_view() -> None:
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="checks")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        await pilot_until(pilot, lambda: isinstance(app.screen, CommandPalette),
                          what="the command palette", timeout=20)  # fmt: skip
        await pilot.press(*"Run queue")
        await pilot_until(pilot, lambda: "Run queue" in _top_option(app),
                          what="'Run queue' ranked first", timeout=20,
                          seen=lambda: _top_option(app))  # fmt: skip
        await pilot.press("enter")
        await pilot_until(pilot, lambda: _paused(app) is not None, what="the Queue view",
                          timeout=20, seen=lambda: type(app.screen).__name__)  # fmt: skip


def _top_option(app: TrainwizApp) -> str:
    options = app.screen.query(OptionList)
    first = options.first() if options else None
    top = first.get_option_at_index(0) if first is not None and first.option_count else None
    return str(top.prompt) if top is not None else ""
