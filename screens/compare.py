"""Compare view: runs side by side, as ``trainwiz runs compare`` prints them, in the wizard.

A list of the runs to tick (the two newest are ticked when the view opens), their train and eval
loss curves on one chart (one colour per run), and a table: final/min/mean loss, eval loss, real
tok/s, wall time, GPU-hours, then the preset fields that differ. The figures come from
``backend.results.compare`` in a thread worker (a long run's metrics file takes a moment), so
the view never blocks; it is the CLI's reader, so both show the same numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Header, SelectionList, Static
from textual_plotext import PlotextPlot

from backend.errors import TrainwizError
from backend.i18n import N_, _
from backend.paths import runs_dir
from widgets.footer import TranslatedFooter

COLOURS = ("cyan", "yellow", "green", "magenta", "red", "blue")


class CompareScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", N_("Close compare"), id="compare.close"),
    ]
    DEFAULT_CSS = """
    CompareScreen #compare-runs { width: 36; border: round $secondary 50%; }
    CompareScreen #compare-right { width: 1fr; }
    CompareScreen #compare-plot { height: 1fr; min-height: 8; }
    CompareScreen #compare-table { height: auto; max-height: 50%; }
    CompareScreen #compare-note { height: auto; padding: 0 1; color: $text-muted; }
    """

    def __init__(self, selected: list[str] | None = None, *, title: str | None = None) -> None:
        """``title`` (a sweep, from the Queue view): ``selected`` is the set to compare, in its
        order (the sweep's ranking), no newest run added; the view's title says what it is."""
        super().__init__()
        self.selected = selected
        self.fixed = title is not None
        self.figures: Any = None
        if title is not None:
            self.title = title

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield SelectionList[str](id="compare-runs")
            with Vertical(id="compare-right"):
                yield Static(_("Tick two or more runs to compare them."), id="compare-note")
                yield PlotextPlot(id="compare-plot")
                yield DataTable(id="compare-table", zebra_stripes=True, cursor_type="row")
        yield TranslatedFooter()

    def on_mount(self) -> None:
        self.query_one("#compare-runs", SelectionList).border_title = _("Runs")
        self._list_runs()

    @work(thread=True, exclusive=True, group="compare-list", exit_on_error=False)
    def _list_runs(self) -> None:
        from backend.runs import list_runs  # deferred: worker thread, not at screen open

        runs = [(s.run_id, s.state) for s in list_runs()]
        self.app.call_from_thread(self._show_runs, runs)

    def _show_runs(self, runs: list[tuple[str, str]]) -> None:
        chosen = list(self.selected or [])  # the Monitor's run, then the newest others
        for run_id, _state in runs:
            if len(chosen) >= 2 or self.fixed:
                break
            if run_id not in chosen:
                chosen.append(run_id)
        picker = self.query_one("#compare-runs", SelectionList)
        picker.clear_options()
        for run_id, state in runs:
            picker.add_option((f"{run_id} ({state})", run_id, run_id in chosen))
        if not runs:
            self._note(_("No runs yet: launch one first (trainwiz launch PRESET)."))
        self._compare(list(picker.selected))

    @on(SelectionList.SelectedChanged, "#compare-runs")
    def _picked(self, event: SelectionList.SelectedChanged[str]) -> None:
        self._compare(list(event.selection_list.selected))

    def _note(self, text: str) -> None:
        self.query_one("#compare-note", Static).update(text)

    def _compare(self, run_ids: list[str]) -> None:
        if self.fixed:  # the sweep's rank order first, runs ticked since after them
            order = {run_id: n for n, run_id in enumerate(self.selected or [])}
            run_ids = sorted(run_ids, key=lambda r: order.get(r, len(order)))
        if len(run_ids) < 2:
            self._note(_("Tick two or more runs to compare them."))
            return
        self._note(_("reading {count} runs…").format(count=len(run_ids)))
        self._load(run_ids)

    @work(thread=True, exclusive=True, group="compare-load", exit_on_error=False)
    def _load(self, run_ids: list[str]) -> None:
        from backend.results.compare import (  # deferred: worker thread, not at screen open
            compare_runs,
        )

        try:
            found = compare_runs([Path(runs_dir()) / run_id for run_id in run_ids])
        except (TrainwizError, OSError, ValueError) as exc:
            self.app.call_from_thread(self._note, str(exc))
            return
        self.app.call_from_thread(self._show, found)

    def _show(self, found: Any) -> None:
        self.figures = found
        self._note(
            _("{count} runs · train loss: lines, eval loss: dots").format(count=len(found.runs))
        )
        plot = self.query_one("#compare-plot", PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        for number, run in enumerate(found.runs):
            colour = COLOURS[number % len(COLOURS)]
            if run.loss[0]:
                plt.plot(*run.loss, marker="braille", color=colour, label=run.run_id)
            if run.eval_loss[0]:
                plt.scatter(*run.eval_loss, marker="dot", color=colour)
        plt.xlabel("step")
        plot.refresh()
        self._fill_table(found)

    def _fill_table(self, found: Any) -> None:
        from backend.runs.summary import duration  # deferred: worker thread, not at screen open

        def num(value: float | None, spec: str = ".4f") -> str:
            return "-" if value is None else format(value, spec)

        table = self.query_one("#compare-table", DataTable)
        table.clear(columns=True)
        table.add_column("")
        for run in found.runs:
            table.add_column(run.run_id)
        runs = found.runs
        table.add_row(_("state"), *[r.state for r in runs])
        table.add_row(_("steps"), *[str(r.steps) for r in runs])
        table.add_row(_("final loss"), *[num(r.final_loss) for r in runs])
        table.add_row(_("min loss"), *[num(r.min_loss) for r in runs])
        table.add_row(_("mean loss"), *[num(r.mean_loss) for r in runs])
        table.add_row(_("min eval loss"), *[num(r.min_eval_loss) for r in runs])
        table.add_row(_("real tok/s"), *[num(r.real_tokens_per_s, ",.0f") for r in runs])
        table.add_row(_("wall time"), *[duration(r.wall_s) for r in runs])
        table.add_row(_("GPU-hours"), *[num(r.gpu_hours, ".2f") for r in runs])
        for path, values in found.differences.items():
            table.add_row(path, *["-" if v is None else str(v) for v in values])

    def action_close(self) -> None:
        self.dismiss(None)
