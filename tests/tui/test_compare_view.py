"""The wizard's Compare view, reached from the command palette: the runs are listed, the
Monitor's run and the newest other are ticked, the chart has one line per run and the table
the CLI's figures and the preset fields that differ."""

from __future__ import annotations

from pathlib import Path

from textual.command import CommandPalette
from textual.widgets import DataTable, OptionList, SelectionList

from backend.preset import load_preset
from screens.compare import CompareScreen
from tests.backend.test_runs_compare import two_runs  # noqa: F401 (fixture)
from tests.waiting import pilot_until
from tui.app import TrainwizApp


async def test_palette_opens_compare_with_curves_and_table(two_runs: tuple[Path, Path]) -> None:  # noqa: F811
    a, b = two_runs
    app = TrainwizApp(load_preset(a / "preset.yaml"), str(a / "preset.yaml"), start_step="monitor",
                      attach_run=a)  # fmt: skip
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+p")
        await pilot_until(  # a loaded machine opens the palette late: wait for it
            pilot,
            lambda: isinstance(app.screen, CommandPalette),
            what="the command palette to open",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        await pilot.press(*"Compare runs")
        await pilot_until(  # and wait for the search to rank the entry first
            pilot,
            lambda: "Compare runs" in _top_option(app),
            what="the palette to rank 'Compare runs' first",
            timeout=20,
            seen=lambda: _top_option(app),
        )
        await pilot.press("enter")
        await pilot_until(
            pilot,
            lambda: (
                isinstance(app.screen, CompareScreen)
                and getattr(app.screen, "figures", None) is not None
            ),
            what="the Compare screen with its comparison",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        screen = app.screen
        assert isinstance(screen, CompareScreen) and screen.figures is not None
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
        await pilot_until(
            pilot,
            lambda: not isinstance(app.screen, CompareScreen),
            what="escape to close the Compare screen",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        assert not isinstance(app.screen, CompareScreen)


def _top_option(app: TrainwizApp) -> str:
    """The palette's first entry (empty while the search has not answered)."""
    options = app.screen.query(OptionList)
    first = options.first() if options else None
    top = first.get_option_at_index(0) if first is not None and first.option_count else None
    return str(top.prompt) if top is not None else ""
