"""The wizard's Compare view, reached from the command palette: the runs are listed, the
Monitor's run and the newest other are ticked, the chart has one line per run and the table
the CLI's figures and the preset fields that differ."""

from __future__ import annotations

import time
from pathlib import Path

from textual.command import CommandPalette
from textual.widgets import DataTable, OptionList, SelectionList

from backend.preset import load_preset
from screens.compare import CompareScreen
from tests.backend.test_runs_compare import two_runs  # noqa: F401 (fixture)
from tui.app import TrainwizApp


async def test_palette_opens_compare_with_curves_and_table(two_runs: tuple[Path, Path]) -> None:  # noqa: F811
    a, b = two_runs
    app = TrainwizApp(load_preset(a / "preset.yaml"), str(a / "preset.yaml"), start_step="monitor",
                      attach_run=a)  # fmt: skip
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        for _ in range(200):  # a loaded machine opens the palette late: wait for it
            if isinstance(app.screen, CommandPalette):
                break
            await pilot.pause(0.05)
        await pilot.press(*"Compare runs")
        for _ in range(200):  # and wait for the search to rank the entry first
            options = app.screen.query(OptionList)
            first = options.first() if options else None
            top = first.get_option_at_index(0) if first is not None and first.option_count else None
            if top is not None and "Compare runs" in str(top.prompt):
                break
            await pilot.pause(0.05)
        await pilot.press("enter")
        deadline = time.monotonic() + 20
        while not (isinstance(app.screen, CompareScreen) and app.screen.figures is not None):
            assert time.monotonic() < deadline, f"no comparison on {app.screen}"
            await pilot.pause(0.1)
        screen = app.screen
        picker = screen.query_one("#compare-runs", SelectionList)
        assert sorted(picker.selected) == sorted([a.name, b.name])
        assert [r.run_id for r in screen.figures.runs] == [a.name, b.name]
        table = screen.query_one("#compare-table", DataTable)
        rows = {
            str(table.get_row_at(i)[0]): table.get_row_at(i)[1:] for i in range(table.row_count)
        }
        assert rows["GPU-hours"] == ["0.00", "2.00"]
        assert rows["training.learning_rate"] == ["0.003", "0.001"]
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, CompareScreen)
