"""Tokens/s (padded and real), samples/s, MFU, step time, progress and ETA for one run."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Static

from backend.i18n import _
from backend.monitor import ThroughputSummary
from backend.paths import METRICS
from backend.runstate import FINAL_STATES, RunState
from backend.units import duration


def _num(v: float | None, fmt: str = ",.0f") -> str:
    return "n/a" if v is None else format(v, fmt)


def render_summary(
    s: ThroughputSummary | None, state: str = "", width: int = 30, note: str = ""
) -> Text:
    """The panel's text; ``note``: the run's OOM fallback line (status.json ``fallback``)."""
    head = Text(_("Throughput"), style="bold")
    if s is not None:
        head.append(f" ({METRICS if s.source == 'metrics' else 'log'})", style="dim")
    if state:
        known = RunState.of(state)  # its label and colour: backend/runstate.py
        head.append(f" {known.label if known else state}", style=known.style if known else "")
    if s is None or (s.step == 0 and not s.finished):
        head.append("\n" + _("no training steps yet"), style="dim")
        if note:
            head.append("\n" + note, style="yellow")
        return head
    out = head
    if s.method:  # LoRA/QLoRA: only the adapters train (docs/lora.md)
        out.append("\n" + s.method, style="magenta")
    if s.max_steps:
        frac = s.progress or 0.0
        # The bar takes what the step numbers leave of the line: one row at any step count. Room
        # is kept for the last step and 100 %, so the bar keeps its length through the run.
        last = _("step {step}/{max}").format(step=s.max_steps, max=s.max_steps)
        steps = _("step {step}/{max}").format(step=s.step, max=s.max_steps).ljust(len(last)) + " "
        percent = f" {frac:.0%}".rjust(5)
        bar_w = max(1, min(20, width - cell_len(steps) - cell_len(percent)))
        full = round(frac * bar_w)
        out.append("\n" + steps)
        out.append("█" * full, style="green")
        out.append("░" * (bar_w - full), style="dim")
        out.append(percent)
    else:
        out.append("\n" + _("step {step}").format(step=s.step))
    over = s.finished or state in FINAL_STATES
    if over:  # the run is over: what it did comes first (small terminals show the top)
        out.append("\n" + _("Final summary"), style="bold cyan")
    if s.tokens_per_s is None and s.source == "log":
        out.append(_("\ntok/s n/a (log only)"), style="dim")
        if over:
            _final(out, s)
    else:
        # The headline is what the data really has (docs/monitor.md), right under the title: an
        # 80x24 terminal shows the top rows of this panel. Padded figures come after.
        # Live: the running attempt's recent pace; over: the run's (backend/monitor/figures.py).
        real = s.run_real_tokens_per_s if over and s.source == "metrics" else s.tokens_nonpad_per_s
        out.append(_("\nreal tok/s {num}").format(num=_num(real)), style="bold")
        if s.mfu_nonpad is not None:  # newer entries: MFU on the data's own tokens
            out.append(
                _("\nreal-token MFU {mfu_nonpad:.1%}").format(mfu_nonpad=s.mfu_nonpad), style="bold"
            )
        if over:
            _final(out, s)
        out.append(_("\npadded tok/s {num}").format(num=_num(s.tokens_per_s)))
    out.append(_("\nsmp/s {num}").format(num=_num(s.samples_per_s, ".2f")))
    out.append(_("  step {num}s").format(num=_num(s.step_time_s, ".3f")))
    mfu = "n/a" if s.mfu is None else f"{s.mfu:.1%}"
    out.append(_("\npadded MFU {mfu}").format(mfu=mfu))
    if over:  # never an ETA for a run that is over
        if note:
            out.append("\n" + note, style="yellow")
        return out
    out.append(_("\nETA {dur}").format(dur=duration(s.eta_s)))
    if s.eta_basis == "steps":  # the run's entry predates the real-token count (docs/monitor.md)
        out.append(" " + _("(step-based)"), style="dim")
    out.append(_("  ran {dur}").format(dur=duration(s.elapsed_s)))
    if s.eta_basis == "real tokens" and s.real_tokens_left is not None:
        left = _("{tokens} real tokens left").format(tokens=_tokens(s.real_tokens_left))
        out.append("\n" + left, style="dim")
    if note:
        out.append("\n" + note, style="yellow")
    return out


def _final(out: Text, s: ThroughputSummary) -> None:
    """The run's summary once it is over: loss first → last, mean loss, wall time, GPU-hours, a
    resumed run's last attempt pace (under the title and the run's real tok/s, its headline)."""
    first = "n/a" if s.first_loss is None else f"{s.first_loss:.4f}"
    last = "n/a" if s.last_loss is None else f"{s.last_loss:.4f}"
    out.append("\n" + _("loss {first} → {last}").format(first=first, last=last))
    if s.mean_loss is not None:  # every step of every attempt, counted once
        out.append("\n" + _("mean train loss {loss:.4g}").format(loss=s.mean_loss))
    out.append("\n" + _("wall time {dur}").format(dur=duration(s.wall_s)))
    if s.gpus and s.gpu_hours is not None:
        out.append("\n" + _("{hours} GPU-hours").format(hours=f"{s.gpu_hours:.2f}"))
    if s.attempts > 1 and s.attempt_real_tokens_per_s is not None:
        out.append(
            "\n"
            + _("attempt {attempt}: real tok/s {num}").format(
                attempt=s.attempt, num=_num(s.attempt_real_tokens_per_s)
            )
        )


def _tokens(n: int) -> str:
    """12.3M, 456k, 789: a token count that fits the panel."""
    if n >= 10**9:
        return f"{n / 1e9:.2f}B"
    if n >= 10**6:
        return f"{n / 1e6:.1f}M"
    if n >= 10**4:
        return f"{n / 1e3:.0f}k"
    return str(n)


class ThroughputMeter(Static):
    DEFAULT_CSS = """
    ThroughputMeter { width: 34; height: auto; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(render_summary(None), id=id)
        self.summary: ThroughputSummary | None = None
        self.state = ""
        self.note = ""

    def show(
        self, summary: ThroughputSummary | None, state: str | None = None, note: str | None = None
    ) -> None:
        if summary is not None:
            self.summary = summary
        if state is not None:
            self.state = state
        if note is not None:
            self.note = note
        # The text lies inside the panel's padding: its width, not the panel's, is the line's.
        width = self.content_size.width or 30
        self.update(render_summary(self.summary, self.state, width, self.note))
