"""The Monitor's first line: which run it shows, whether that run is over, its world size.

A wizard opened after a run shows that run's final figures; without this line nothing said the
figures were final rather than live, and the world size the run trained with (the trainer's,
from its start record) was shown only when it differed from the plan.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from backend.i18n import _
from backend.runstate import RunState


def render_header(run_id: str, state: str = "", preset: str = "", world: int | None = None) -> Text:
    """``Run ID · finished — over: final figures · world size 2 · u: another run``; the preset is
    named when the run's id does not already say it (an 80-column line is short)."""
    # One row at any width: wrapped to two at 80 columns it pushed the Monitor's final figures
    # (real tok/s) off a 24-row terminal; the least needed parts come last and are cut first.
    text = Text(_("Run {run}").format(run=run_id), style="bold", no_wrap=True, overflow="ellipsis")
    if preset and preset not in run_id:
        text.append(f" ({preset})")
    known = RunState.of(state) if state else None
    if state:
        text.append(" · ")
        text.append(known.label if known else state, style=known.style if known else "")
    if known is not None and known.final:
        text.append(" — " + _("over: final figures"), style="italic")
    if world is not None:  # known once the trainer's start record is read
        text.append(" · " + _("world size {n}").format(n=world))
    text.append(" · " + _("u: another run"), style="dim")
    return text


class RunHeader(Static):
    DEFAULT_CSS = """
    RunHeader { height: 1; padding: 0 1; }
    """

    def __init__(self, run_id: str, *, id: str | None = None) -> None:
        super().__init__(render_header(run_id), id=id)
        self.run_id = run_id
        self.state = ""
        self.preset = ""
        self.world_size: int | None = None

    def show(self, state: str, preset: str, world_size: int | None) -> None:
        self.state, self.preset, self.world_size = state, preset, world_size
        self.update(render_header(self.run_id, state, preset, world_size))
