"""Loss against step (downsampled min/max so spikes survive), learning rate on the right axis,
grad-norm spikes marked with vertical lines and listed in the caption."""

from __future__ import annotations

import time

from plotext._utility import get_matrix_data
from rich.text import Text
from textual.app import ComposeResult, RenderResult
from textual.containers import Vertical
from textual.timer import Timer
from textual.widgets import Static
from textual_plotext import PlotextPlot

from backend.i18n import _
from backend.monitor import MetricsView


def caption(view: MetricsView | None) -> Text:
    if view is None or view.points == 0:
        return Text(_("loss: no logged steps yet"), style="dim")
    t = Text()
    loss = view.summary.last_loss
    t.append("loss ", style="bold")
    t.append(f"{loss:.4f}" if loss is not None else "–")
    if view.eval_loss[1]:
        t.append(f" · eval {view.eval_loss[1][-1]:.4f}", style="yellow")
    if view.lr[1]:
        t.append(f" · lr {view.lr[1][-1]:.2e}", style="magenta")
    if view.grad_norm[1]:
        t.append(f" · gnorm {view.grad_norm[1][-1]:.2f}")
    t.append(_(" · {count} pts").format(count=view.points))
    if view.spike_total:
        last = view.spikes[-1]
        t.append(
            (
                _(" · {count} grad-norm spikes (step {step}: {norm} vs median {median})")
                if view.spike_total > 1
                else _(" · {count} grad-norm spike (step {step}: {norm} vs median {median})")
            ).format(
                count=view.spike_total,
                step=last.step,
                norm=f"{last.grad_norm:.3g}",
                median=f"{last.median:.3g}",
            ),
            style="bold red",
        )
    if view.nonfinite_loss_steps:
        t.append(
            _(" · non-finite loss at step {step}").format(step=view.nonfinite_loss_steps[0]),
            style="bold red",
        )
    return t


# Rows plotext draws around its canvas here: the axis lines above and below it, the x tick labels
# and the "step" label (_draw sets no title).
FRAME_ROWS = 4


def lr_ticks(lo: float, hi: float, rows: int) -> list[float]:
    """The learning-rate axis's ticks (lowest, middle, highest) that fall on distinct rows of a
    canvas ``rows`` high: the extremes first, the middle only where it has a row of its own.

    plotext removes duplicate ticks through a set (``plotext._utility.brush``), so the order it
    draws them in follows the process's string hash seed; two ticks on one row (the middle and
    the top at 80x24, where the canvas has 2 rows) showed either label, one run or the other."""
    if hi <= lo:
        return [hi]
    rows_of = get_matrix_data([hi, lo, (lo + hi) / 2], [lo, hi], max(rows, 1))
    kept: dict[int, float] = {}
    for tick, row in zip((hi, lo, (lo + hi) / 2), rows_of, strict=True):
        kept.setdefault(row, tick)
    return sorted(kept.values())


class LossPlot(PlotextPlot):
    """The plot, whose learning-rate ticks are chosen for the height it is rendered at (a
    layout change above it, such as the run header wrapping, changes its rows without a new
    view)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.lr_range: tuple[float, float] | None = None

    def render(self) -> RenderResult:
        if self.lr_range is not None:
            ticks = lr_ticks(*self.lr_range, self.size.height - FRAME_ROWS)
            # plotext annotates yside as a number; it takes "left"/"right" (documented).
            self.plt.yticks(ticks, [f"{t:.1e}" for t in ticks], yside="right")  # type: ignore[arg-type]
        return super().render()


class LossChart(Vertical, can_focus=True):
    ALLOW_MAXIMIZE = True
    DEFAULT_CSS = """
    LossChart { height: 1fr; min-height: 6; }
    LossChart > #loss-caption { height: 1; }
    LossChart > PlotextPlot { height: 1fr; }
    """

    def __init__(self, *, id: str | None = None, min_redraw_s: float = 1.0) -> None:
        super().__init__(id=id)
        self.view: MetricsView | None = None
        self.min_redraw_s = min_redraw_s
        self.draws = 0
        self._last_draw = 0.0
        self._pending: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Static(caption(None), id="loss-caption")
        yield LossPlot(id="loss-plot")

    def on_mount(self) -> None:
        self._draw()

    @property
    def plot_width(self) -> int:
        return max(20, self.size.width - 12)

    def show(self, view: MetricsView) -> None:
        """Caption now; the plot at most once per ``min_redraw_s`` (a plotext build costs tens
        of ms on the UI thread, and metrics may arrive at 10 Hz)."""
        self.view = view
        self.query_one("#loss-caption", Static).update(caption(view))
        if self._pending is not None:
            return
        wait = self._last_draw + self.min_redraw_s - time.monotonic()
        if wait <= 0 or view.summary.finished:
            self._draw()
        else:
            self._pending = self.set_timer(wait, self._draw)

    def _draw(self) -> None:
        self._pending = None
        self._last_draw = time.monotonic()
        self.draws += 1
        plot = self.query_one(LossPlot)
        plot.lr_range = None
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        view = self.view
        if view is None or not view.loss[0]:
            plt.title("")
            plot.refresh()
            return
        xs, ys = view.loss
        plt.plot(xs, ys, marker="braille", color="cyan", label="loss")
        if view.eval_loss[0]:
            plt.plot(*view.eval_loss, marker="dot", color="yellow", label="eval")
        if view.lr[0]:
            plt.plot(*view.lr, marker="braille", color="magenta", yside="right", label="lr")
            plot.lr_range = (min(view.lr[1]), max(view.lr[1]))  # ticks: LossPlot.render
        for spike in view.spikes[-10:]:
            plt.vertical_line(spike.step, color="red")
        plt.xlabel("step")
        plot.refresh()
